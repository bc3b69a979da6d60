"""``refold import`` killed (SIGKILL) while it stores a large transcript leaves no empty session:
the session is created in the transaction that stores its messages (``sync_messages(create=…)``),
so it exists with all of them or not at all, and running the import again stores each message
once."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from import_cli import Run, cli_on_home, ok_json, stored_messages

from refold.errors import Conflict
from refold.messages.model import content_text
from refold.store import Store
from refold.store.base import SessionDraft

COUNT = 20_000  # stored in ~0.3 s: a wide window to kill the import in, in a fast test


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Run:
    return cli_on_home(tmp_path, monkeypatch)


def _transcript(path: Path) -> Path:
    with path.open("w") as fh:
        for i in range(COUNT):
            fh.write(json.dumps({"role": "user" if i % 2 == 0 else "assistant",
                                 "content": f"msg{i} " + "word " * 30}) + "\n")
    return path


def _sessions(db: Path) -> list[tuple[str, int, int]] | None:
    """(id, message_count, message rows) of each session, read-only; None while the database
    or its schema is not there yet."""
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    except sqlite3.Error:
        return None
    try:
        return [(str(r[0]), int(r[1]), int(r[2])) for r in conn.execute(
            "SELECT s.id, s.message_count, (SELECT count(*) FROM messages m "
            "WHERE m.session_id = s.id) FROM sessions s")]
    except sqlite3.Error:
        return None
    finally:
        conn.close()


def test_import_killed_once_its_session_exists_leaves_no_empty_session(
        tmp_path: Path, run: Run) -> None:
    transcript = _transcript(tmp_path / "big.jsonl")
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if k not in ("REFOLD_HOME", "REFOLD_DB")}
    proc = subprocess.Popen([sys.executable, "-m", "refold.cli.main", "--home", str(home),
                             "import", str(transcript)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:  # SIGKILL the moment a session row is visible (or when the import ends first)
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            if _sessions(home / "refold.db"):
                break
            time.sleep(0.001)
    finally:
        proc.kill()
        proc.wait()
    for session_id, count, rows in _sessions(home / "refold.db") or []:
        assert rows == count == COUNT, \
            f"the killed import left session {session_id} with {rows} of {COUNT} messages"

    again = ok_json(run("import", str(transcript), "--json"))
    assert again["appended"] + again["skipped"] == COUNT
    stored = stored_messages(tmp_path, again["session_id"])
    assert [content_text(m.message).split()[0] for m in stored] == \
        [f"msg{i}" for i in range(COUNT)]
    assert _sessions(home / "refold.db") == [(again["session_id"], COUNT, COUNT)]
    assert ok_json(run("import", str(transcript), "--json"))["appended"] == 0


MESSAGES = [{"role": "user", "content": "deploy the api"},
            {"role": "assistant", "content": "deployed on port 8080"}]


@pytest.mark.parametrize("backend", ["sqlite_store", "postgres_store"])
def test_sync_creates_the_session_with_its_messages(request: pytest.FixtureRequest,
                                                    backend: str) -> None:
    store: Store = request.getfixturevalue(backend)
    draft = SessionDraft(title="deploy", source="import", started_at=1_700_000_000.0)
    result = store.sync_messages("s1", MESSAGES, created_at=[1_700_000_000.0, None],
                                 create=draft)
    assert len(result.appended) == 2
    session = store.get_session("s1")
    assert (session.title, session.source, session.started_at, session.message_count) == \
        ("deploy", "import", 1_700_000_000.0, 2)
    # the session exists now: the draft is not used again, nothing is stored twice
    again = store.sync_messages("s1", MESSAGES, create=SessionDraft(title="other"))
    assert (len(again.appended), again.skipped, store.get_session("s1").title) == \
        (0, 2, "deploy")


@pytest.mark.parametrize("backend", ["sqlite_store", "postgres_store"])
def test_a_sync_that_fails_creates_no_session(request: pytest.FixtureRequest,
                                               monkeypatch: pytest.MonkeyPatch,
                                               backend: str) -> None:
    store: Store = request.getfixturevalue(backend)
    store.create_session(title="taken")
    with pytest.raises(Conflict):  # the title is checked in the transaction: nothing created
        store.sync_messages("s2", MESSAGES, create=SessionDraft(title="taken"))

    def boom(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("killed while storing the messages")

    monkeypatch.setattr(store, "_insert", boom)  # fails after the session row is written
    with pytest.raises(RuntimeError):
        store.sync_messages("s3", MESSAGES, create=SessionDraft(title="fresh"))
    assert [s.title for s in store.list_sessions()] == ["taken"]
