"""An import that brings back rows a rewind held says what that rewound in turn: the restore
makes the session's diverging tail inactive (reversibly), and the report said "rewound 0"."""

from __future__ import annotations

from pathlib import Path

import pytest
from import_cli import Run, cli_on_home, ok_json

from refold.store.sqlite import SQLiteStore

SAMPLE = Path(__file__).resolve().parents[2] / "src" / "refold" / "data" / "sample_session.jsonl"


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Run:
    return cli_on_home(tmp_path, monkeypatch)


def _active(tmp_path: Path, session_id: str) -> int:
    store = SQLiteStore(str(tmp_path / "home" / "refold.db"))
    try:
        return len(store.get_messages(session_id))
    finally:
        store.close()


def test_the_report_counts_what_a_restore_rewound(tmp_path: Path, run: Run) -> None:
    sid = ok_json(run("import", str(SAMPLE), "--json"))["session_id"]
    diverge = tmp_path / "diverge.jsonl"
    head = SAMPLE.read_text(encoding="utf-8").splitlines()[:10]
    diverge.write_text("\n".join([*head, '{"role": "user", "content": "do something else"}'])
                       + "\n", encoding="utf-8")
    edit = ok_json(run("import", str(diverge), "--session", "sample_session", "--json"))
    assert (edit["appended"], edit["rewound"]) == (1, 26)
    assert run("sessions", "undo-rewind", "1").exit_code == 0
    assert _active(tmp_path, sid) == 36
    # the edit again: its row comes back from the rewind that held it, and the 26 go again
    again = ok_json(run("import", str(diverge), "--session", "sample_session", "--json"))
    assert (again["appended"], again["restored"], again["rewound"]) == (0, 1, 26)
    assert _active(tmp_path, sid) == 11
    back = ok_json(run("import", str(SAMPLE), "--session", "sample_session", "--json"))
    assert (back["appended"], back["restored"], back["rewound"], back["skipped"]) == \
        (0, 26, 1, 10)
    assert _active(tmp_path, sid) == 36
    text = run("import", str(diverge), "--session", "sample_session").output
    assert "26 stored message(s) rewound" in text
