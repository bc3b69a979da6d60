"""``refold import`` of Hermes-Agent's ``state.db``, written by Hermes' own ``SessionDB``.

Hermes' modules import its top-level ``tools`` package, which refold's ``tests/tools`` shadows
inside pytest: Hermes writes its database in a child process (``hermes``), as in
``tests/integrations/test_hermes_plugin.py``.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from import_cli import Run, cli_on_home, ok_json, stored_messages

from refold.compaction.structure import provider_problems
from refold.errors import InvalidInput
from refold.messages.model import content_text
from refold.store.sqlite import SQLiteStore

SUMMARY = ("[CONTEXT COMPACTION — REFERENCE ONLY] Earlier turns were compacted into the summary "
           "below.\n## Goal\nfix the deploy port")
SHOT = [{"type": "text", "text": "看这个截图"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Run:
    return cli_on_home(tmp_path, monkeypatch)


def said(tmp_path: Path, session_id: str) -> list[tuple[str, str]]:
    """(role, text) of every stored message of a session."""
    return [(m.role, content_text(m.message) or "<calls>" if m.message.get("tool_calls")
             else content_text(m.message)) for m in stored_messages(tmp_path, session_id)]


HERMES = """
import json, sys
from hermes_state import SessionDB
from pathlib import Path
db = SessionDB(db_path=Path(sys.argv[1]))
for name, args, kwargs in json.loads(sys.argv[2]):
    if name == "rewind_to":  # the message that holds this text, and everything after it
        row = db._conn.execute("SELECT id FROM messages WHERE content = ?", args).fetchone()
        db.rewind_to_message(kwargs["session"], row[0])
    else:
        getattr(db, name)(*args, **kwargs)
db.close()
"""


def hermes(path: Path, *ops: tuple[str, list[Any], dict[str, Any]]) -> None:
    """Run ``SessionDB`` methods on ``path`` in Hermes' own process."""
    done = subprocess.run([sys.executable, "-c", HERMES, str(path), json.dumps(ops)],
                          cwd=path.parent, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def add(session: str, role: str, content: Any, **more: Any
        ) -> tuple[str, list[Any], dict[str, Any]]:
    return ("append_message", [session, role, content], more)


def hermes_db(path: Path) -> None:
    """A Hermes session that went through an in-place compaction, a rewind, a screenshot and a
    rotation into a child session, written by Hermes itself."""
    hermes(
        path,
        ("create_session", ["s1", "cli"], {"model": "anthropic/claude-sonnet-4"}),
        ("set_session_title", ["s1", "fix the flaky deploy"], {}),
        add("s1", "user", "Why does deploy fail on port 5433?"),
        add("s1", "assistant", None, reasoning="check the ports first", tool_calls=[
            {"id": "c1", "type": "function",
             "function": {"name": "terminal", "arguments": json.dumps({"command": "ss -ltnp"})}}]),
        add("s1", "tool", "LISTEN 0 128 127.0.0.1:5433 postgres", tool_call_id="c1",
            tool_name="terminal"),
        add("s1", "assistant", "Postgres already holds 5433; move the app to 5434."),
        add("s1", "user", "ok"),
        add("s1", "assistant", "Done: app on 5434."),
        # Hermes' in-place compaction: the head it protects, its summary, the tail it keeps
        ("archive_and_compact", ["s1", [
            {"role": "user", "content": "Why does deploy fail on port 5433?"},
            {"role": "assistant", "content": SUMMARY},
            {"role": "user", "content": "ok"},
            {"role": "assistant", "content": "Done: app on 5434."}]], {}),
        add("s1", "user", "ok"),  # said again after the compaction: a turn, not a copy
        add("s1", "assistant", "Anything else?"),
        add("s1", "user", "scrap that, use port 6000"),
        add("s1", "assistant", "Switching to 6000."),
        ("rewind_to", ["scrap that, use port 6000"], {"session": "s1"}),
        add("s1", "user", SHOT),
        add("s1", "assistant", "截图显示端口冲突。"),
        ("update_token_counts", ["s1"], {"input_tokens": 1200, "output_tokens": 300,
                                         "cache_read_tokens": 100,
                                         "estimated_cost_usd": 0.0123}),
        # the older rotation: the session ends for compression and a child goes on
        ("end_session", ["s1", "compression"], {}),
        ("create_session", ["s2", "cli"], {"parent_session_id": "s1"}),
        add("s2", "user", "Why does deploy fail on port 5433?"),
        add("s2", "user", "[CONTEXT SUMMARY]: the port moved to 5434"),
        add("s2", "user", SHOT), add("s2", "assistant", "截图显示端口冲突。"),
        add("s2", "user", "now write the changelog"),
        add("s2", "assistant", "Changelog written."))


S1 = [("user", "Why does deploy fail on port 5433?"), ("assistant", "<calls>"),
      ("tool", "LISTEN 0 128 127.0.0.1:5433 postgres"),
      ("assistant", "Postgres already holds 5433; move the app to 5434."),
      ("user", "ok"), ("assistant", "Done: app on 5434."),
      ("user", "ok"), ("assistant", "Anything else?"),
      ("user", "看这个截图"), ("assistant", "截图显示端口冲突。")]


def test_every_session_imports_as_it_was_said(run: Run, tmp_path: Path) -> None:
    state = tmp_path / "state.db"
    hermes_db(state)
    result = run("import", str(state), "--json")
    reports = ok_json(result)
    assert [(r["hermes_session"], r["appended"]) for r in reports] == [("s1", 10), ("s2", 2)]
    # what Hermes wrote besides the conversation is left out and said
    assert "left out 6 compaction copy, 2 rewound, 2 compaction summary" in result.stderr
    assert said(tmp_path, reports[0]["session_id"]) == S1
    assert said(tmp_path, reports[1]["session_id"]) == [
        ("user", "now write the changelog"), ("assistant", "Changelog written.")]
    sessions = {s["id"]: s for s in ok_json(run("sessions", "list", "--json"))}
    first, child = sessions[reports[0]["session_id"]], sessions[reports[1]["session_id"]]
    assert first["title"] == "fix the flaky deploy" and first["source"] == "hermes"
    assert (first["input_tokens"], first["output_tokens"]) == (1200, 300)
    assert first["cost_usd"] == pytest.approx(0.0123)
    assert child["title"] == "fix the flaky deploy #2"
    assert (child["parent_session_id"], child["link_kind"]) == (first["id"], "compaction")
    store = SQLiteStore(str(tmp_path / "home" / "refold.db"))
    try:
        call = store.get_messages(first["id"])[1].message
        assert call["reasoning_content"] == "check the ports first"
        assert call["tool_calls"][0]["function"]["name"] == "terminal"
        assert store.get_messages(first["id"])[8].message["content"] == SHOT
    finally:
        store.close()
    hits = ok_json(run("search", "deploy port 5433", "--json"))
    assert hits and hits[0]["session_id"] == first["id"]


def test_importing_again_after_hermes_went_on_stores_only_what_is_new(
        run: Run, tmp_path: Path) -> None:
    state = tmp_path / "state.db"
    hermes_db(state)
    first = ok_json(run("import", str(state), "--json"))
    again = ok_json(run("import", str(state), "--json"))
    assert [(r["appended"], r["skipped"]) for r in again] == [(0, 10), (0, 2)]
    hermes(state, add("s2", "user", "and tag the release"),
           add("s2", "assistant", "Tagged v1.4.2."),
           ("update_token_counts", ["s1"], {"input_tokens": 50}))  # the totals grow too
    later = ok_json(run("import", str(state), "--json"))
    assert [(r["appended"], r["skipped"]) for r in later] == [(0, 10), (2, 2)]
    assert said(tmp_path, first[1]["session_id"])[-2:] == [
        ("user", "and tag the release"), ("assistant", "Tagged v1.4.2.")]
    sessions = {s["id"]: s for s in ok_json(run("sessions", "list", "--json"))}
    assert sessions[first[0]["session_id"]]["input_tokens"] == 1200  # counted once


def test_a_write_hermes_has_not_committed_is_not_read_and_nothing_waits(
        run: Run, tmp_path: Path) -> None:
    state = tmp_path / "state.db"
    hermes_db(state)
    hermes = sqlite3.connect(state, isolation_level=None)  # Hermes, mid-write (WAL)
    hermes.execute("BEGIN IMMEDIATE")
    hermes.execute("INSERT INTO messages (session_id, role, content, timestamp) "
                   "VALUES ('s2', 'user', 'not committed yet', 1.0)")
    files = {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
             for p in tmp_path.glob("state.db*")}
    reports = ok_json(run("import", str(state), "--json"))
    assert [r["appended"] for r in reports] == [10, 2]
    assert {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in tmp_path.glob("state.db*")} == files  # only read, while Hermes writes
    hermes.execute("COMMIT")
    hermes.close()
    assert [r["appended"] for r in ok_json(run("import", str(state), "--json"))] == [0, 1]
    assert ("user", "not committed yet") in said(tmp_path, reports[1]["session_id"])


def test_a_directory_finds_the_state_db_beside_other_files(run: Run, tmp_path: Path) -> None:
    hermes_home = tmp_path / ".hermes"
    hermes_home.mkdir()
    hermes_db(hermes_home / "state.db")
    other = sqlite3.connect(hermes_home / "kanban.db")  # another database Hermes keeps
    other.execute("CREATE TABLE boards (id TEXT)")
    other.commit()
    other.close()
    result = run("import", str(hermes_home))
    assert result.exit_code == 0, result.output
    assert "1 of 1 file(s) imported: 12 message(s) stored, 0 already stored" in result.stdout


def test_a_database_that_is_not_hermes_is_refused_and_left_as_it_was(
        run: Run, tmp_path: Path) -> None:
    ok_json(run("import", str(Path(__file__).resolve().parents[2] / "src" / "refold" / "data"
                               / "sample_session.jsonl"), "--json"))
    own = tmp_path / "home" / "refold.db"
    before = hashlib.sha256(own.read_bytes()).hexdigest()
    result = run("import", str(own))
    assert isinstance(result.exception, InvalidInput)  # the CLI's one handler: exit 2
    assert "is a SQLite database, not a transcript" in str(result.exception)
    assert hashlib.sha256(own.read_bytes()).hexdigest() == before
    forced = run("import", str(own), "--format", "hermes")
    assert isinstance(forced.exception, InvalidInput)
    assert "cannot read it as Hermes-Agent's session database" in str(forced.exception)
    assert hashlib.sha256(own.read_bytes()).hexdigest() == before


def test_an_older_hermes_schema_without_the_newer_columns_imports(
        run: Run, tmp_path: Path) -> None:
    state = tmp_path / "state.db"
    conn = sqlite3.connect(state)
    conn.executescript("""
        CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT NOT NULL, model TEXT,
            parent_session_id TEXT, started_at REAL NOT NULL, ended_at REAL, end_reason TEXT);
        CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL,
            role TEXT NOT NULL, content TEXT, tool_call_id TEXT, tool_calls TEXT,
            tool_name TEXT, timestamp REAL NOT NULL, token_count INTEGER);
        INSERT INTO sessions VALUES ('old', 'telegram', 'gpt-4o', NULL, 1700000000, NULL, NULL);
        INSERT INTO messages (session_id, role, content, timestamp)
            VALUES ('old', 'user', 'remind me to renew the passport', 1700000001),
                   ('old', 'assistant', 'Noted: renew the passport.', 1700000002),
                   ('old', 'session_meta', '{}', 1700000003),
                   ('gone', 'user', 'a session whose row was deleted', 1700000004);
    """)
    conn.commit()
    conn.close()
    result = run("import", str(state), "--json")
    reports = ok_json(result)
    assert [r["appended"] for r in reports] == [2, 1] and "1 session_meta row" in result.stderr
    sessions = {s["title"]: s for s in ok_json(run("sessions", "list", "--json"))}
    assert sessions["remind me to renew the passport"]["started_at"] == pytest.approx(1700000000)
    # a message whose session row is gone is imported all the same, as its own session
    assert sessions["a session whose row was deleted"]["started_at"] == pytest.approx(
        1700000004)


def test_a_session_refolds_hermes_plugin_keeps_is_not_copied(run: Run, tmp_path: Path) -> None:
    state = tmp_path / "state.db"
    hermes_db(state)
    store = SQLiteStore(str(tmp_path / "home" / "refold.db"))
    try:
        kept = store.create_session(title="hermes:s1", source="hermes")  # as the plugin names it
    finally:
        store.close()
    result = run("import", str(state), "--json")
    reports = ok_json(result)
    assert reports[0] == {"session_id": kept.id, "title": "hermes:s1", "hermes_session": "s1",
                          "appended": 0, "skipped": 0, "rewound": 0, "kept_by_plugin": True}
    assert said(tmp_path, kept.id) == []
    assert reports[1]["appended"] == 2


AGENT = """
import json, os, sys
from pathlib import Path
os.environ["HERMES_HOME"] = sys.argv[1]
from hermes_state import SessionDB
from run_agent import AIAgent
from refold.testing import ScriptedReply, serve
call = {"id": "call_1", "type": "function", "function": {
    "name": "terminal", "arguments": json.dumps({"command": "echo port 5433 busy"})}}
replies = [ScriptedReply(content=None, tool_calls=[call]),
           ScriptedReply(content="Port 5433 is busy; use 5434."),
           ScriptedReply(content="Done: the app listens on 5434.")]
with serve(replies) as upstream:
    agent = AIAgent(base_url=upstream.base_url, api_key="sk-test", model="gpt-4o-mini",
                    quiet_mode=True, session_db=SessionDB(db_path=Path(sys.argv[1]) / "state.db"),
                    skip_context_files=True, skip_memory=True, enabled_toolsets=["terminal"],
                    max_iterations=5)
    first = agent.run_conversation("Why does the deploy fail? Check the port.")
    agent.run_conversation("Move it to 5434.", conversation_history=first["messages"])
"""


def test_what_a_real_hermes_agent_wrote_imports_provider_valid(run: Run, tmp_path: Path) -> None:
    hermes_home = tmp_path / ".hermes"
    hermes_home.mkdir()
    done = subprocess.run([sys.executable, "-c", AGENT, str(hermes_home)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    reports = ok_json(run("import", str(hermes_home), "--json"))
    assert [r["appended"] for r in reports] == [6]
    assert said(tmp_path, reports[0]["session_id"]) == [
        ("user", "Why does the deploy fail? Check the port."), ("assistant", "<calls>"),
        ("tool", '{"output": "port 5433 busy", "exit_code": 0, "error": null}'),
        ("assistant", "Port 5433 is busy; use 5434."), ("user", "Move it to 5434."),
        ("assistant", "Done: the app listens on 5434.")]
    store = SQLiteStore(str(tmp_path / "home" / "refold.db"))
    try:
        messages = [m.message for m in store.get_messages(reports[0]["session_id"])]
    finally:
        store.close()
    assert messages[1]["tool_calls"] == [{"id": "call_1", "type": "function", "function": {
        "name": "terminal", "arguments": json.dumps({"command": "echo port 5433 busy"})}}]
    for provider in ("openai", "anthropic"):
        assert provider_problems(messages, provider) == []


COMPACTING_AGENT = """
import os, sys
from pathlib import Path
os.environ["HERMES_HOME"] = sys.argv[1]
from hermes_state import SessionDB
from run_agent import AIAgent
from refold.testing import ScriptedReply, serve
with serve(default=lambda body: ScriptedReply(content=f"Reply {len(body['messages'])}.")) as up:
    agent = AIAgent(base_url=up.base_url, api_key="sk-test", model="gpt-4o-mini",
                    quiet_mode=True, session_db=SessionDB(db_path=Path(sys.argv[1]) / "state.db"),
                    skip_context_files=True, skip_memory=True, enabled_toolsets=["terminal"],
                    max_iterations=3)
    agent.compression_in_place = sys.argv[2] == "in-place"
    history = None
    for turn in range(12):
        history = agent.run_conversation(f"Question {turn} about the deploy",
                                         conversation_history=history)["messages"]
    compacted = agent._compress_context(history, None, force=True)[0]
    agent.run_conversation("After the compaction", conversation_history=compacted)
"""


@pytest.mark.parametrize("mode", ["in-place", "rotation"])
def test_a_real_hermes_compaction_imports_the_conversation_once(
        run: Run, tmp_path: Path, mode: str) -> None:
    """Hermes' own compressor (its summary model unreachable, so its fallback marker) writes its
    head, summary and tail; the import holds each turn once, the summary nowhere."""
    hermes_home = tmp_path / ".hermes"
    hermes_home.mkdir()
    done = subprocess.run([sys.executable, "-c", COMPACTING_AGENT, str(hermes_home), mode],
                          cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    result = run("import", str(hermes_home), "--json")
    reports = ok_json(result)
    assert "1 compaction summary" in result.stderr
    turns = [text for report in reports for role, text in said(tmp_path, report["session_id"])
             if role == "user"]
    assert turns == [f"Question {turn} about the deploy" for turn in range(12)] + [
        "After the compaction"]
    replies = [text for report in reports for role, text in said(tmp_path, report["session_id"])
               if role == "assistant"]
    assert len(replies) == 13 and not any("CONTEXT COMPACTION" in r for r in replies)
    assert [r["appended"] for r in reports] == ([26] if mode == "in-place" else [24, 2])


def test_a_serve_tenants_session_with_the_plugins_title_is_not_the_plugins(
        run: Run, tmp_path: Path) -> None:
    state = tmp_path / "state.db"
    hermes_db(state)
    store = SQLiteStore(str(tmp_path / "home" / "refold.db"))
    try:
        store.create_session(title="hermes:s1", source="serve", owner="tenant-b")
    finally:
        store.close()
    reports = ok_json(run("import", str(state), "--json"))
    assert [(r["appended"], r.get("kept_by_plugin")) for r in reports] == [(10, None), (2, None)]


def test_an_import_that_fails_storing_a_session_leaves_no_empty_one(
        run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each Hermes session is created in the transaction that stores its messages: a failure
    (or a kill) while storing them left the session behind, empty."""
    from refold.store.sqlite.ledger import LedgerOps

    state = tmp_path / "state.db"
    hermes_db(state)

    def boom(*_args: object, **_kwargs: object) -> None:
        raise OSError("killed while storing the messages")

    original = LedgerOps._insert
    monkeypatch.setattr(LedgerOps, "_insert", boom)  # after the session row is written
    assert run("import", str(state), "--json").exit_code != 0
    monkeypatch.setattr(LedgerOps, "_insert", original)
    assert ok_json(run("sessions", "list", "--json")) == []
    reports = ok_json(run("import", str(state), "--json"))  # the re-run stores it all, once
    assert [(r["hermes_session"], r["appended"]) for r in reports] == [("s1", 10), ("s2", 2)]
