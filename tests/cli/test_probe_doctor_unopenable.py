"""A SQLite file too damaged to open (truncated) told every command to run ``refold doctor
--repair``, which did nothing (it opens the file the same way) and said it again. Now the
error says refold cannot repair it and what can (the copy ``doctor --repair`` made before, if
there is one; SQLite's shell), and ``doctor --repair`` claims no repair and exits 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from main_exit import run_main as _main

SAMPLE = Path(__file__).resolve().parents[2] / "src" / "refold" / "data" / "sample_session.jsonl"


@pytest.fixture
def truncated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
              capsys: pytest.CaptureFixture[str]) -> Path:
    for name in ("REFOLD_HOME", "REFOLD_DB"):
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    assert _main(capsys, "--home", str(home), "import", str(SAMPLE))[0] == 0
    whole = (home / "refold.db").read_bytes()
    for companion in home.glob("refold.db-*"):
        companion.unlink()
    broken = tmp_path / "trunc.db"
    broken.write_bytes(whole[:8192])  # the header and a page: the schema's pages are gone
    return broken


def _damaged_beyond_repair(said: str, broken: Path) -> None:
    assert f"the database {broken} is damaged and cannot be opened" in said, said
    assert "refold cannot repair that itself" in said and ".recover" in said
    assert "run `refold doctor --repair`" not in said


def test_a_command_on_a_truncated_file_says_what_to_do(
        truncated: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _main(capsys, "--home", str(tmp_path / "home"), "--db", str(truncated),
                           "sessions", "list")
    assert code == 1 and not out
    _damaged_beyond_repair(err, truncated)
    assert "restore it from a backup" in err


def test_doctor_repair_on_a_truncated_file_repairs_nothing(
        truncated: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = truncated.read_bytes()
    code, out, _ = _main(capsys, "--home", str(tmp_path / "home"), "--db", str(truncated),
                           "doctor", "--repair")
    assert code == 1
    _damaged_beyond_repair(out, truncated)
    assert "repair: nothing done" in out and "rebuilt" not in out
    assert not list(tmp_path.glob("trunc.db.bak-*"))  # no copy claimed or made
    assert truncated.read_bytes() == before
    code, out, _ = _main(capsys, "--home", str(tmp_path / "home"), "--db", str(truncated),
                         "doctor", "--repair", "--json")
    report = json.loads(out)
    assert code == 1 and report["ok"] is False and "repair" not in report
    _damaged_beyond_repair(report["database"]["error"], truncated)


def test_the_copy_an_earlier_repair_made_is_named(
        truncated: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    older = tmp_path / "trunc.db.bak-20261101T000000Z"
    newer = tmp_path / "trunc.db.bak-20261201T000000Z"
    older.write_bytes(b"")
    newer.write_bytes(b"")
    code, _, err = _main(capsys, "--home", str(tmp_path / "home"), "--db", str(truncated),
                         "search", "currency")
    assert code == 1
    _damaged_beyond_repair(err, truncated)
    assert str(newer) in err and str(older) not in err
