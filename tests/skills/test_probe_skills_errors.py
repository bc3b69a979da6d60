"""``refold skills`` on folders it cannot write prints one ``error:`` line, not a Python
traceback: ``export`` into a missing folder (now created), into a path it cannot write, and
``add`` with a home whose skills folder cannot be made; ``export`` into refold's own home (it
wrote ``home/<skill>/SKILL.md`` beside the database) is refused. Made deterministic without
permissions (the tests may run as root): a regular file stands where a folder must be."""

from __future__ import annotations

from pathlib import Path

import pytest

from refold.cli.main import main


def _main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``refold ARGS``, as the console script exits."""
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    out = capsys.readouterr()
    return int(exit_info.value.code or 0), out.out, out.err


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
         capsys: pytest.CaptureFixture[str]) -> Path:
    for name in ("REFOLD_HOME", "REFOLD_DB"):
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    code, _, err = _main(capsys, "--home", str(home), "skills", "add", "s-one", "-d", "one",
                         "--body", "b")
    assert code == 0, err
    return home


def _one_error_line(err: str) -> None:
    assert "Traceback" not in err and err.startswith("error: "), err
    assert len(err.strip().splitlines()) == 1, err


def test_export_into_a_missing_folder_creates_it(home: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    out_dir = tmp_path / "not" / "there"
    code, out, err = _main(capsys, "--home", str(home), "skills", "export", str(out_dir))
    assert code == 0, err
    assert (out_dir / "s-one" / "SKILL.md").is_file() and "exported 1 skill(s)" in out


def test_export_of_an_empty_library_into_a_missing_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("REFOLD_HOME", "REFOLD_DB"):
        monkeypatch.delenv(name, raising=False)
    out_dir = tmp_path / "not" / "there"
    code, out, err = _main(capsys, "--home", str(tmp_path / "home"), "skills", "export",
                           str(out_dir))
    assert code == 0, err  # was a FileNotFoundError traceback (no skill made the folder)
    assert (out_dir / ".refold-export.json").is_file() and "exported 0 skill(s)" in out


def test_export_where_it_cannot_write_is_one_error_line(
        home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    code, _, err = _main(capsys, "--home", str(home), "skills", "export", str(blocker / "sub"))
    assert code == 1
    _one_error_line(err)
    assert "cannot export the skills to" in err


def test_add_with_a_home_it_cannot_write_is_one_error_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("REFOLD_HOME", "REFOLD_DB"):
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    (home / "skills").write_text("not a folder")
    code, _, err = _main(capsys, "--home", str(home), "skills", "add", "a-b", "-d", "x",
                         "--body", "y")
    assert code == 1
    _one_error_line(err)
    assert "cannot write the skills library" in err


@pytest.mark.parametrize("inside", ["", "memories", "memories/x", "skills/y"])
def test_export_into_refolds_own_folders_is_refused(
        home: Path, capsys: pytest.CaptureFixture[str], inside: str) -> None:
    before = sorted(p.relative_to(home) for p in home.rglob("*"))
    code, _, err = _main(capsys, "--home", str(home), "skills", "export", str(home / inside))
    assert code == 2
    _one_error_line(err)
    assert "refold's own folder" in err
    assert sorted(p.relative_to(home) for p in home.rglob("*")) == before
