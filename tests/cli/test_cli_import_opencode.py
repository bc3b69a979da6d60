"""``refold import`` of OpenCode's ``opencode.db``: a database OpenCode 1.18 itself wrote
(``data/README.md`` says how), with a bash call, a refused read, a subagent and two automatic
compactions."""

from __future__ import annotations

import json
import shutil
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from import_cli import Run, cli_on_home, ok_json, stored_messages

from refold.compaction.structure import provider_problems

FIXTURE = Path(__file__).with_name("data") / "opencode.db"
MAIN, SUBAGENT = "ses_db7a57b10ffetVrv60SWYDF1vE", "ses_db7a55aa3ffezJ2qbcO1H9Z9lr"


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Run:
    return cli_on_home(tmp_path, monkeypatch)


@pytest.fixture
def opencode_db(tmp_path: Path) -> Path:
    """A copy (the import only reads, but a test may change its copy as OpenCode would)."""
    folder = tmp_path / "opencode"
    folder.mkdir()
    return Path(shutil.copy(FIXTURE, folder / "opencode.db"))


def stored(tmp_path: Path, session_id: str) -> list[dict[str, Any]]:
    return [m.message for m in stored_messages(tmp_path, session_id)]


def test_every_turn_its_model_saw_imports_and_its_compactions_do_not(
        run: Run, tmp_path: Path, opencode_db: Path) -> None:
    result = run("import", str(opencode_db), "--json")
    reports = ok_json(result)
    assert [(r["opencode_session"], r["appended"]) for r in reports] == [
        (MAIN, 30), (SUBAGENT, 2)]
    assert "left out 2 compaction request, 2 compaction summary" in result.stderr
    messages = stored(tmp_path, reports[0]["session_id"])
    users = [m["content"] for m in messages if m["role"] == "user"]
    assert users[:3] == ['"Why does the deploy fail? check the port"',
                         '"now read the config file"', '"please ask a subagent about 5434"']
    assert users[-1] == '"so which port now?"'
    assert sum("long answer about the pipeline part" in u for u in users) == 6
    bash, result_of_bash = messages[1], messages[2]
    assert bash["tool_calls"] == [{"id": "call_port", "type": "function", "function": {
        "name": "bash", "arguments": json.dumps({"command": "echo port 5433 busy",
                                                 "description": "check port"})}}]
    assert result_of_bash == {"role": "tool", "tool_call_id": "call_port",
                              "content": "port 5433 busy\n"}
    refused = next(m for m in messages if m.get("tool_call_id") == "call_read")
    assert refused["content"] == "The user rejected permission to use this specific tool call."
    # OpenCode's compaction summaries (its title call's text here) are nowhere
    assert not any(m["role"] == "assistant" and m.get("content") == "Deploy port check"
                   for m in messages)
    for provider in ("openai", "anthropic"):
        assert provider_problems(messages, provider) == []
    assert stored(tmp_path, reports[1]["session_id"]) == [
        {"role": "user", "content": "Is port 5434 free? Report briefly."},
        {"role": "assistant", "content": "Subagent report: 5434 is free."}]


def test_the_tokens_equal_opencodes_own_totals_and_count_once(
        run: Run, opencode_db: Path) -> None:
    ok_json(run("import", str(opencode_db), "--json"))
    again = ok_json(run("import", str(opencode_db), "--json"))
    assert [(r["appended"], r["skipped"]) for r in again] == [(0, 30), (0, 2)]
    with sqlite3.connect(opencode_db) as conn:
        own = dict(conn.execute("SELECT title, tokens_input + tokens_output FROM session"))
    sessions = ok_json(run("sessions", "list", "--json"))
    assert {s["title"]: s["input_tokens"] + s["output_tokens"] for s in sessions} == own
    assert {s["source"] for s in sessions} == {"opencode"}


def test_turns_taken_back_by_a_revert_are_left_out(
        run: Run, tmp_path: Path, opencode_db: Path) -> None:
    with sqlite3.connect(opencode_db) as conn:  # what OpenCode's /undo leaves: a revert point
        conn.execute("UPDATE session SET revert = ? WHERE id = ?",
                     (json.dumps({"messageID": "msg_2485b0578001eZ0Y0naBotSfDH"}), MAIN))
    result = run("import", str(opencode_db), "--json")
    reports = ok_json(result)
    assert reports[0]["appended"] == 24
    assert "8 reverted" in result.stderr
    users = [m["content"] for m in stored(tmp_path, reports[0]["session_id"])
             if m["role"] == "user"]
    assert users[-1].startswith("Continue if you have next steps")
    assert not any("part 6" in u for u in users)


def test_its_folder_imports_and_search_finds_what_was_said(
        run: Run, opencode_db: Path) -> None:
    result = run("import", str(opencode_db.parent))
    assert result.exit_code == 0, result.output
    assert "1 of 1 file(s) imported: 32 message(s) stored, 0 already stored" in result.stdout
    hits = ok_json(run("search", "which port did the subagent say was free?", "--json"))
    assert any("5434 is free" in h["content"] for h in hits[:3])


def test_a_folder_with_format_opencode_imports_only_its_databases(
        run: Run, opencode_db: Path) -> None:
    shutil.copy(Path(__file__).resolve().parents[2] / "src" / "refold" / "data"
                / "sample_session.jsonl", opencode_db.parent / "notes.jsonl")
    reports = ok_json(run("import", str(opencode_db.parent), "--format", "opencode", "--json"))
    assert {r["file"] for r in reports} == {str(opencode_db)}
    assert [r["appended"] for r in reports] == [30, 2]


@contextmanager
def proxy_on_home(home: Path, upstream: str) -> Iterator[str]:
    """``refold serve`` (its app under uvicorn, on a real socket) over ``home``'s database."""
    import uvicorn

    from refold.cli.serve import bind_socket
    from refold.config import Settings
    from refold.server import create_app
    from refold.server.runner import uvicorn_config
    from refold.store.sqlite import SQLiteStore

    home.mkdir(parents=True, exist_ok=True)
    store = SQLiteStore(str(home / "refold.db"))
    settings = Settings(home=home, upstream=upstream, context_length=100_000)
    app = create_app(settings, store=store)
    sock = bind_socket("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn_config(app, settings, graceful_seconds=10))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        assert thread.is_alive()
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    finally:
        server.should_exit = True
        thread.join(15)
        sock.close()
        store.close()


def as_opencode_sends(message: dict[str, Any]) -> dict[str, Any]:
    """A stored reply as OpenCode (the Vercel AI SDK) re-sends it: ``content: ""`` beside its
    calls, each call's arguments re-serialized compactly."""
    if message["role"] != "assistant" or not message.get("tool_calls"):
        return message
    return {"role": "assistant", "content": "", "tool_calls": [
        {"id": c["id"], "type": "function", "function": {
            "name": c["function"]["name"], "arguments": json.dumps(
                json.loads(c["function"]["arguments"]), separators=(",", ":"))}}
        for c in message["tool_calls"]]}


def test_conversations_refold_serve_stored_whole_are_not_copied_again(
        run: Run, tmp_path: Path, opencode_db: Path) -> None:
    """OpenCode through ``refold serve`` (its requests as OpenCode 1.18 sends them: its system
    prompt, the user's text, its spelling of each reply), then ``refold import`` of its
    database, as the README suggests: each conversation the proxy stored whole was stored a
    second time (its subagent's here; every session of a run that never compacted), so every
    search found each message twice. The main conversation compacted: the proxy holds only
    its opening turns, and it is imported (nothing of it is lost)."""
    from refold.messages.opencode_db import read_opencode
    from refold.testing import ScriptedReply, serve

    sessions = {s.native_id: s.messages for s in read_opencode(opencode_db)}
    conversations = [sessions[SUBAGENT], sessions[MAIN][:11]]  # the main one: to the subagent
    replies = [ScriptedReply(content=m.get("content"), tool_calls=m.get("tool_calls"))
               for c in conversations for m in c if m["role"] == "assistant"]
    with serve(replies) as upstream, proxy_on_home(tmp_path / "home", upstream.base_url) as url:
        for conversation in conversations:
            for index, message in enumerate(conversation):
                if message["role"] != "assistant":
                    continue
                history = [{"role": "system", "content": "You are opencode."},
                           *map(as_opencode_sends, conversation[:index])]
                response = httpx.post(url + "/chat/completions", timeout=30, json={
                    "model": "scripted", "messages": history, "stream": True,
                    "stream_options": {"include_usage": True}, "tool_choice": "auto"})
                assert response.status_code == 200, response.text
    before = ok_json(run("sessions", "list", "--json"))
    assert sorted(s["message_count"] for s in before) == [2, 11]

    result = run("import", str(opencode_db), "--json")
    reports = {r["opencode_session"]: r for r in ok_json(result)}
    assert [reports[SUBAGENT][k] for k in ("appended", "skipped", "kept_by_serve")] == [
        0, 2, True]
    served = next(s for s in before if s["message_count"] == 2)
    assert reports[SUBAGENT]["session_id"] == served["id"]
    assert (reports[MAIN]["appended"], reports[MAIN].get("kept_by_serve")) == (30, None)
    assert "1 session refold serve keeps" in result.stderr
    after = ok_json(run("sessions", "list", "--json"))
    assert sorted(s["message_count"] for s in after) == [2, 11, 30]
    again = {r["opencode_session"]: r["appended"] for r in ok_json(run(
        "import", str(opencode_db), "--json"))}
    assert again == {MAIN: 0, SUBAGENT: 0}
    said = run("import", str(opencode_db)).stdout
    assert f"imported nothing: session {served['id']}" in said
