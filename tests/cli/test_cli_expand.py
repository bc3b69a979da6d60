"""``refold expand``: the expanded message on stdout, warnings on stderr, or one JSON object."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from refold.cli.main import cli


@pytest.fixture
def proj(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("REFOLD_HOME", "REFOLD_DB"):
        monkeypatch.delenv(name, raising=False)
    root = tmp_path / "proj"
    root.mkdir()
    (root / "app.py").write_text("print('hi')\n")
    return root


def run(tmp_path: Path, *args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(cli, ["--home", str(tmp_path / "home"), "expand", *args],
                              input=input, catch_exceptions=True)


def test_json_reports_attached_and_refused(tmp_path: Path, proj: Path) -> None:
    result = run(tmp_path, "check @file:app.py and @file:../x @session:nope", "--cwd",
                 str(proj), "--context-length", "8000", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert "print('hi')" in data["message"]
    assert [(r["reference"], r["status"]) for r in data["references"]] == [
        ("@session:nope", "refused"), ("@file:app.py", "attached"), ("@file:../x", "refused")]
    assert len(data["warnings"]) == 2 and data["tokens"] > 0


def test_plain_output_and_warnings_on_stderr(tmp_path: Path, proj: Path) -> None:
    result = run(tmp_path, "-", "--cwd", str(proj), input="see @file:app.py @file:.env\n")
    assert result.exit_code == 0
    assert "--- Attached context ---" in result.stdout and "warning:" not in result.stdout
    assert "warning: @file:.env: refused" in result.stderr


def test_text_without_references_comes_back_unchanged(tmp_path: Path, proj: Path) -> None:
    result = run(tmp_path, "just a question, mail me@file:x", "--cwd", str(proj))
    assert result.exit_code == 0 and result.stdout == "just a question, mail me@file:x\n"


def test_bad_input_is_a_clear_error(tmp_path: Path, proj: Path) -> None:
    from refold.cli.main import main

    for args, needle in ((["   "], "nothing to expand"),
                         (["x", "--context-length", "0"], "--context-length"),
                         (["x", "--cwd", str(proj / "missing")], "--cwd")):
        with pytest.raises(SystemExit) as exc:
            main(["--home", str(tmp_path / "home"), "expand", *args])
        assert exc.value.code == 2, (args, needle)
