"""``refold import --session PREFIX`` with a prefix of a stored session's id too short to
reach it (under the 8 characters ``sessions list`` shows) created a new session with that id
and title, which ``sessions show PREFIX`` then opened instead of the one meant. Refused, as
``--title PREFIX`` and ``sessions rename`` refuse such a title."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from import_cli import Run, cli_on_home, ok_json

from refold.errors import InvalidInput


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Run:
    return cli_on_home(tmp_path, monkeypatch)


def test_a_short_id_prefix_creates_no_session(run: Run, tmp_path: Path) -> None:
    first = tmp_path / "t1.json"
    first.write_text(json.dumps([{"role": "user", "content": "one"},
                                 {"role": "assistant", "content": "two"}]))
    stored = ok_json(run("import", str(first), "--json"))["session_id"]
    other = tmp_path / "t2.json"
    other.write_text(json.dumps([{"role": "user", "content": "three"}]))
    for prefix in (stored[:4], stored[:7].upper()):
        result = run("import", str(other), "--session", prefix)
        assert isinstance(result.exception, InvalidInput), result.output  # exit status 2
        said = str(result.exception)
        assert f"is the start of session {stored}'s id" in said, said
        assert f"--session {stored[:8]}" in said
    assert [s["id"] for s in ok_json(run("sessions", "list", "--json"))] == [stored]
    added = ok_json(run("import", str(other), "--session", stored[:8], "--json"))
    assert added["session_id"] == stored and added["appended"] == 1
    named = ok_json(run("import", str(other), "--session", "notes", "--json"))  # not hex
    assert named["session_id"] == "notes"
