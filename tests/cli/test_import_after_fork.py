"""A transcript imported again (grown, or as it was) goes to the session holding most of it,
never to a fork made from it: a fork at its fifth message is a start of it too, and took the
rest of the transcript again as copies (31 of them) while the original stayed behind."""

from __future__ import annotations

from pathlib import Path

import pytest
from import_cli import Run, cli_on_home, ok_json

from refold.store.sqlite import SQLiteStore

SAMPLE = Path(__file__).resolve().parents[2] / "src" / "refold" / "data" / "sample_session.jsonl"


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Run:
    return cli_on_home(tmp_path, monkeypatch)


def _counts(tmp_path: Path) -> tuple[int, int]:
    store = SQLiteStore(str(tmp_path / "home" / "refold.db"))
    try:
        with store.db.read() as conn:
            return conn.execute("SELECT count(*), count(DISTINCT session_id) FROM messages"
                                ).fetchone()
    finally:
        store.close()


def test_a_grown_transcript_goes_to_its_session_not_to_a_fork(tmp_path: Path, run: Run) -> None:
    first = ok_json(run("import", str(SAMPLE), "--title", "notes", "--json"))
    assert run("sessions", "fork", "notes", "--at", "5", "--title", "fork5").exit_code == 0
    rows_before, _ = _counts(tmp_path)
    grown = tmp_path / "grown.jsonl"
    grown.write_text(SAMPLE.read_text(encoding="utf-8")
                     + '{"role": "user", "content": "one more question after the fix"}\n',
                     encoding="utf-8")
    report = ok_json(run("import", str(grown), "--json"))
    assert report["session_id"] == first["session_id"]
    assert (report["appended"], report["skipped"]) == (1, 36)
    assert _counts(tmp_path)[0] == rows_before + 1
    again = ok_json(run("import", str(SAMPLE), "--json"))  # as it was: nothing new anywhere
    assert again["appended"] == 0 and _counts(tmp_path)[0] == rows_before + 1


def test_a_full_fork_does_not_take_the_originals_new_turns(tmp_path: Path, run: Run) -> None:
    first = ok_json(run("import", str(SAMPLE), "--title", "notes", "--json"))
    assert run("sessions", "fork", "notes", "--title", "whole").exit_code == 0  # all of it
    grown = tmp_path / "grown.jsonl"
    grown.write_text(SAMPLE.read_text(encoding="utf-8")
                     + '{"role": "user", "content": "one more question after the fix"}\n',
                     encoding="utf-8")
    report = ok_json(run("import", str(grown), "--json"))
    assert (report["session_id"], report["appended"]) == (first["session_id"], 1)
