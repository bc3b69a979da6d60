"""Claude Code and Codex transcripts read as the turns their model saw (``refold import``).

The Claude Code records below have the shapes of real transcripts (checked against public ones:
marot/spotter's test/fixtures/transcripts, MIT): one API reply split over several records with
the same ``message.id``, each tool result written between them as its call finished, parallel
results in the order they finished, bookkeeping lines (``progress``, ``file-history-snapshot``,
``system``), an interrupted turn's empty text. The Codex lines follow ``codex-rs/protocol``'s
``ResponseItem`` and rollout line shapes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refold.compaction.structure import provider_problems
from refold.errors import InvalidInput, RefoldError
from refold.messages.agent_logs import detect
from refold.messages.load import load_agent_log, sniff_agent_log
from refold.store import open_store


def _cc(kind: str, uuid: str, message: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"parentUuid": None, "isSidechain": False, "userType": "external", "cwd": "/p",
            "sessionId": "s-1", "version": "2.1.38", "type": kind, "message": message,
            "uuid": uuid, "timestamp": "2026-02-11T20:36:45.693Z", **extra}


def _reply(uuid: str, mid: str, *blocks: dict[str, Any]) -> dict[str, Any]:
    return _cc("assistant", uuid, {"id": mid, "type": "message", "role": "assistant",
                                   "model": "claude-opus-4", "content": list(blocks)})


def _result(uuid: str, call: str, text: str) -> dict[str, Any]:
    return _cc("user", uuid, {"role": "user", "content": [
        {"tool_use_id": call, "type": "tool_result", "content": text}]},
        toolUseResult={"stdout": text})


def _use(call: str, name: str, **args: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": call, "name": name, "input": args}


CLAUDE_CODE = [
    {"type": "file-history-snapshot", "messageId": "m0", "snapshot": {}, "isSnapshotUpdate": False},
    _cc("progress", "p1", {}, data={"type": "hook_progress"}) | {"message": None},
    _cc("user", "u1", {"role": "user", "content": "The invoice totals test fails on 3.12"}),
    _reply("a1", "msg_A", {"type": "text", "text": "\n\n"}),
    _reply("a2", "msg_A", {"type": "thinking", "thinking": "Run the tests first.",
                           "signature": "sig"}),
    _reply("a3", "msg_A", _use("toolu_1", "Bash", command="pytest -q tests/test_totals.py")),
    _reply("a4", "msg_A", _use("toolu_2", "Read", file_path="/p/src/totals.py")),
    _result("r2", "toolu_2", "def total(lines): ..."),  # the second call finished first
    _result("r1", "toolu_1", "FAILED tests/test_totals.py::test_rounding"),
    _reply("a5", "msg_B", {"type": "text", "text": "The rounding uses float; I will fix it."}),
    _reply("a6", "msg_B", _use("toolu_3", "Edit", file_path="/p/src/totals.py")),
    _result("r3", "toolu_3", "The file /p/src/totals.py has been updated."),
    _reply("a7", "msg_B", _use("toolu_4", "Bash", command="pytest -q")),
    _result("r4", "toolu_4", "12 passed"),
    _result("r4", "toolu_4", "12 passed"),  # written twice (the same uuid): read once
    {"parentUuid": "r4", "type": "system", "subtype": "turn_duration", "uuid": "sys1"},
    _cc("user", "u2", {"role": "user", "content": [{"type": "text", "text": ""}]}),
    _cc("user", "side1", {"role": "user", "content": "a subagent's own prompt"},
        isSidechain=True),
    _cc("user", "u3", {"role": "user", "content": "Thanks. Commit it."}),
    _reply("a8", "msg_C", {"type": "text", "text": "Committed as 4f2a9c1."}),
]


def _write_jsonl(path: Path, records: list[Any], tail: str = "") -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail, encoding="utf-8")
    return path


def test_a_claude_code_transcript_becomes_the_turns_the_api_saw(tmp_path: Path) -> None:
    log = load_agent_log(_write_jsonl(tmp_path / "s.jsonl", CLAUDE_CODE), "claude-code")
    roles = [(m["role"], [c["id"] for c in m.get("tool_calls") or []], m.get("tool_call_id"))
             for m in log.messages]
    assert roles == [
        ("user", [], None),
        ("assistant", ["toolu_1", "toolu_2"], None),  # one reply, however many records
        ("tool", [], "toolu_1"), ("tool", [], "toolu_2"),  # in the order of the calls
        ("assistant", ["toolu_3", "toolu_4"], None),
        ("tool", [], "toolu_3"), ("tool", [], "toolu_4"),
        ("user", [], None), ("assistant", [], None)]
    first = log.messages[1]
    assert first["reasoning_content"] == "Run the tests first."
    assert json.loads(first["tool_calls"][0]["function"]["arguments"]) == {
        "command": "pytest -q tests/test_totals.py"}
    assert log.messages[2]["content"] == "FAILED tests/test_totals.py::test_rounding"
    assert log.messages[-2]["content"] == "Thanks. Commit it."
    for provider in ("openai", "anthropic"):
        assert provider_problems(log.messages, provider) == []
    assert log.skipped == {"progress": 1, "file-history-snapshot": 1, "system": 1,
                           "repeated": 1, "empty": 2, "subagent": 1}


def test_a_subagent_file_alone_is_that_conversation(tmp_path: Path) -> None:
    side = [_cc("user", "x1", {"role": "user", "content": "Find the config loader"},
                isSidechain=True),
            _reply("x2", "msg_X", {"type": "text", "text": "It is in src/config.py."})
            | {"isSidechain": True}]
    log = load_agent_log(_write_jsonl(tmp_path / "agent-a1.jsonl", side), "claude-code")
    assert [m["role"] for m in log.messages] == ["user", "assistant"]


def test_an_unfinished_last_line_is_left_out_and_said_but_a_broken_one_inside_is_refused(
        tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "live.jsonl", CLAUDE_CODE, tail='{"parentUuid": "a8", "ty')
    log = load_agent_log(path, "claude-code")
    assert log.skipped["unfinished last line"] == 1 and len(log.messages) == 9
    broken = tmp_path / "broken.jsonl"
    broken.write_text(json.dumps(CLAUDE_CODE[2]) + "\n{not json\n" + json.dumps(CLAUDE_CODE[3])
                      + "\n", encoding="utf-8")
    with pytest.raises(InvalidInput, match="line 2: not valid JSON"):
        load_agent_log(broken, "claude-code")


def _codex(kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {"timestamp": "2026-01-02T14:58:23.000Z", "type": kind, "payload": payload}


CODEX = [
    _codex("session_meta", {"id": "019b7f37", "cwd": "/p", "cli_version": "0.65.0"}),
    _codex("response_item", {"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "<environment_context>cwd /p</environment_context>"}]}),
    _codex("response_item", {"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "Why does the build fail?"}]}),
    _codex("event_msg", {"type": "user_message", "message": "Why does the build fail?"}),
    _codex("turn_context", {"model": "gpt-5-codex"}),
    _codex("response_item", {"type": "reasoning", "summary": [
        {"type": "summary_text", "text": "Look at the build log."}], "encrypted_content": "x"}),
    _codex("response_item", {"type": "function_call", "name": "shell",
                             "arguments": '{"command": ["make"]}', "call_id": "call_1"}),
    _codex("response_item", {"type": "function_call_output", "call_id": "call_1",
                             "output": "error: missing header foo.h"}),
    _codex("response_item", {"type": "custom_tool_call", "call_id": "call_2",
                             "name": "apply_patch", "input": "*** Begin Patch\n..."}),
    _codex("response_item", {"type": "custom_tool_call_output", "call_id": "call_2",
                             "output": "Done!"}),
    _codex("response_item", {"type": "local_shell_call", "call_id": "call_3",
                             "status": "completed",
                             "action": {"type": "exec", "command": ["make", "test"]}}),
    _codex("response_item", {"type": "function_call_output", "call_id": "call_3",
                             "output": [{"type": "input_text", "text": "all tests pass"}]}),
    _codex("response_item", {"type": "web_search_call", "status": "completed",
                             "action": {"type": "search", "query": "foo.h"}}),
    _codex("response_item", {"type": "message", "role": "assistant", "content": [
        {"type": "output_text", "text": "The header was missing; the build passes now."}]}),
    _codex("compacted", {"message": "summary"}),
]


def test_a_codex_rollout_becomes_chat_messages(tmp_path: Path) -> None:
    log = load_agent_log(_write_jsonl(tmp_path / "rollout-1.jsonl", CODEX), "codex")
    shape = [(m["role"], [c["function"]["name"] for c in m.get("tool_calls") or []])
             for m in log.messages]
    assert shape == [("user", []), ("user", []),
                     ("assistant", ["shell"]), ("tool", []),
                     ("assistant", ["apply_patch"]), ("tool", []),
                     ("assistant", ["local_shell"]), ("tool", []),
                     ("assistant", [])]
    assert log.messages[2]["reasoning_content"] == "Look at the build log."
    patch = log.messages[4]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(patch) == {"input": "*** Begin Patch\n..."}
    assert log.messages[7]["content"] == "all tests pass"
    assert provider_problems(log.messages, "openai") == []
    assert log.skipped == {"session_meta": 1, "event_msg": 1, "turn_context": 1,
                           "web_search_call": 1, "compacted": 1}


def test_an_older_codex_rollout_holds_the_items_themselves(tmp_path: Path) -> None:
    old = [{"id": "019a", "timestamp": "2025-05-01T10:00:00Z", "instructions": None}]
    old += [r["payload"] for r in CODEX if r["type"] == "response_item"]
    log = load_agent_log(_write_jsonl(tmp_path / "rollout-old.jsonl", old), "codex")
    assert len(log.messages) == 9 and log.skipped == {"session_meta": 1, "web_search_call": 1}


def test_detection_never_takes_a_chat_message_for_an_agent_record(tmp_path: Path) -> None:
    assert detect(CLAUDE_CODE[0]) == "claude-code" and detect(CLAUDE_CODE[2]) == "claude-code"
    assert detect(CODEX[0]) == "codex" and detect(CODEX[1]) == "codex"
    assert detect({"role": "user", "content": "hi", "uuid": "x"}) is None
    assert detect({"role": "assistant", "type": "message", "content": []}) is None
    plain = _write_jsonl(tmp_path / "plain.jsonl", [{"role": "user", "content": "hi"}])
    assert sniff_agent_log(plain) is None
    assert sniff_agent_log(tmp_path / "missing.jsonl") is None


def _refold(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "refold.cli.main", "--home", str(home), *args],
                          capture_output=True, text=True, timeout=60, check=False)


def test_refold_import_recognises_both_and_a_second_import_stores_nothing(
        tmp_path: Path) -> None:
    home = tmp_path / "home"
    cc = _write_jsonl(tmp_path / "9f3c.jsonl", CLAUDE_CODE)
    codex = _write_jsonl(tmp_path / "rollout-2026-01-02.jsonl", CODEX)
    first = _refold(home, "import", str(cc))
    assert first.returncode == 0, first.stderr
    assert "read as a Claude Code transcript; left out" in first.stderr
    assert "imported 9 message(s)" in first.stdout
    again = _refold(home, "import", str(cc))
    assert "imported 0 message(s)" in again.stdout and "9 already stored" in again.stdout
    assert _refold(home, "import", str(codex)).returncode == 0
    found = _refold(home, "search", "which header was missing?", "--json")
    assert found.returncode == 0, found.stderr
    hits = json.loads(found.stdout)
    # titled by its first request (the file's name is a timestamp and a uuid)
    assert hits[0]["title"] == "Why does the build fail?" and "foo.h" in hits[0]["snippet"]
    store = open_store(str(home / "refold.db"))
    try:
        sessions = store.list_sessions()
        sources = sorted((s.source, s.message_count) for s in sessions)
        times = {s.source: {m.created_at for m in store.get_messages(s.id)} for s in sessions}
    finally:
        store.close()
    assert sources == [("claude-code", 9), ("codex", 9)]
    # when each turn was said, from the records' timestamps (not when it was imported)
    assert times == {"claude-code": {1770842205.693}, "codex": {1767365903.0}}
    recent = _refold(home, "search", "which header was missing?", "--since", "7d", "--json")
    assert recent.returncode == 0 and json.loads(recent.stdout) == []
    # asked for explicitly as plain messages, it is refused with the line that is not one
    strict = _refold(home, "import", str(cc), "--format", "openai")
    assert strict.returncode == 2 and "line 1" in strict.stderr and "Traceback" not in strict.stderr
    assert "--format claude-code" in strict.stderr  # the hint says what it is


def test_an_agent_transcript_is_read_from_stdin_and_a_pipe_as_from_its_file(
        tmp_path: Path) -> None:
    """`cat f.jsonl | refold import - --format claude-code` and `refold compact <(…)` with
    it were refused ("reads a file, not stdin"), though the error for the plain read says to
    use that format: read once and imported as the file is (the same session, nothing twice)."""
    import os

    home = tmp_path / "home"
    cc = _write_jsonl(tmp_path / "9f3c.jsonl", CLAUDE_CODE)
    piped = subprocess.run([sys.executable, "-m", "refold.cli.main", "--home", str(home),
                            "import", "-", "--format", "claude-code", "--json"],
                           input=cc.read_text(), capture_output=True, text=True, timeout=60)
    assert piped.returncode == 0, piped.stderr
    assert "<stdin>: read as a Claude Code transcript; left out" in piped.stderr
    first = json.loads(piped.stdout)
    assert first["appended"] == 9 and first["title"] == "The invoice totals test fails on 3.12"
    again = _refold(home, "import", str(cc), "--json")
    assert json.loads(again.stdout)["session_id"] == first["session_id"]
    assert json.loads(again.stdout)["appended"] == 0
    read, write = os.pipe()  # what <(…) gives: /dev/fd/N
    os.write(write, cc.read_bytes())
    os.close(write)
    try:
        compacted = subprocess.run(
            [sys.executable, "-m", "refold.cli.main", "--home", str(home), "compact",
             f"/dev/fd/{read}", "--format", "claude-code", "--context-length", "4000",
             "--json"], capture_output=True, text=True, timeout=60, pass_fds=(read,))
    finally:
        os.close(read)
    assert compacted.returncode == 0, compacted.stderr
    assert json.loads(compacted.stdout)["messages"][0]["content"] == \
        "The invoice totals test fails on 3.12"


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from(
        ["", "x", "user", "assistant", "tool_use", "tool_result", "text", "message", "reasoning",
         "function_call", "function_call_output", "custom_tool_call", "local_shell_call",
         "response_item", "session_meta", "m1", "c1", "gemini", "token_count"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(
        ["type", "role", "content", "message", "payload", "id", "uuid", "isSidechain", "text",
         "summary", "call_id", "name", "arguments", "output", "input", "tool_use_id", "action",
         "toolCalls", "tokens", "args", "result", "functionResponse", "response", "usage",
         "info", "last_token_usage", "thoughts", "projectHash", "messages"]),
        inner, max_size=5),
    max_leaves=12)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=st.lists(_JSON, min_size=1, max_size=6),
       fmt=st.sampled_from(["claude-code", "codex", "gemini"]))
def test_any_records_read_or_give_a_clear_error(tmp_path_factory: pytest.TempPathFactory,
                                                 records: list[Any], fmt: str) -> None:
    """Whatever the lines hold: messages, or a RefoldError (never a TypeError, a 500)."""
    path = tmp_path_factory.mktemp("fuzz") / "t.jsonl"
    _write_jsonl(path, records)
    try:
        log = load_agent_log(path, fmt)
    except RefoldError:
        return
    assert all(isinstance(m, dict) and m.get("role") for m in log.messages)


@pytest.mark.parametrize("fmt", ["claude-code", "codex"])
def test_a_transcript_that_grew_is_imported_into_its_session_again(tmp_path: Path,
                                                                    fmt: str) -> None:
    """A nightly `refold import` of every transcript: the file of a session that went on since
    holds its old turns and new ones. Its own conversation id names the session, so the old
    turns are found and only the new ones stored (the content-derived id of other imports
    would have made a second session holding everything again)."""
    home = tmp_path / "home"
    records = CLAUDE_CODE if fmt == "claude-code" else CODEX
    path = tmp_path / "live.jsonl"
    _write_jsonl(path, records[:-1])
    first = _refold(home, "import", str(path))
    assert first.returncode == 0, first.stderr
    _write_jsonl(path, records + ([_cc("user", "u9", {"role": "user", "content": "And push it."})]
                                  if fmt == "claude-code" else
                                  [_codex("response_item", {"type": "message", "role": "user",
                                          "content": [{"type": "input_text",
                                                       "text": "And push it."}]})]))
    grown = _refold(home, "import", str(path), "--json")
    assert grown.returncode == 0, grown.stderr
    report = json.loads(grown.stdout)
    assert report["rewound"] == 0 and report["appended"] in (1, 2) and report["skipped"] >= 7
    store = open_store(str(home / "refold.db"))
    try:
        (session,) = store.list_sessions()
        texts = [m.message.get("content") for m in store.get_messages(session.id)]
    finally:
        store.close()
    assert session.id == report["session_id"] and texts[-1] == "And push it."


def test_a_subagent_file_is_its_own_session_and_never_rewinds_its_parent(tmp_path: Path) -> None:
    """A subagent's file (subagents/agent-*.jsonl) carries its parent's sessionId: imported
    after the parent it rewound the parent's 293 messages (a real transcript), now it is a
    session of its own."""
    home = tmp_path / "home"
    main = _write_jsonl(tmp_path / "s-1.jsonl", CLAUDE_CODE)
    side = _write_jsonl(tmp_path / "agent-a77.jsonl", [
        _cc("user", "x1", {"role": "user", "content": "Find the config loader"},
            isSidechain=True, agentId="a77"),
        _reply("x2", "msg_X", {"type": "text", "text": "It is in src/config.py."})
        | {"isSidechain": True, "agentId": "a77"}])
    assert _refold(home, "import", str(main)).returncode == 0
    report = json.loads(_refold(home, "import", str(side), "--json").stdout)
    assert report["rewound"] == 0 and report["appended"] == 2
    again = json.loads(_refold(home, "import", str(side), "--json").stdout)
    assert again["session_id"] == report["session_id"] and again["appended"] == 0
    store = open_store(str(home / "refold.db"))
    try:
        counts = sorted(s.message_count for s in store.list_sessions())
    finally:
        store.close()
    assert counts == [2, 9]


def _linked(records: list[dict[str, Any]], parents: dict[str, str | None]) -> list[dict[str, Any]]:
    return [dict(r, parentUuid=parents.get(r["uuid"])) for r in records]


def test_an_edited_turn_keeps_the_branch_the_conversation_ended_on(tmp_path: Path) -> None:
    """The user went back and asked again: the file holds both branches, linked by parentUuid.
    The conversation as it ended is read (the model never saw the QuickSort branch beside the
    MergeSort one); the abandoned branch is counted. Parallel calls are sibling records of one
    reply: both stay, with their results."""
    records = [
        _cc("user", "u1", {"role": "user", "content": "Implement a sort"}),
        _reply("a1", "msg_1", {"type": "text", "text": "Which one?"}),
        _cc("user", "u2a", {"role": "user", "content": "QuickSort"}),
        _reply("a2a", "msg_2a", {"type": "text", "text": "Here is QuickSort."}),
        _cc("user", "u2b", {"role": "user", "content": "Actually MergeSort, it must be stable"}),
        _reply("a2b", "msg_2b", _use("toolu_x", "Write", file_path="merge.py")),
        _reply("a2c", "msg_2b", _use("toolu_y", "Write", file_path="test_merge.py")),
        _result("rx", "toolu_x", "written merge.py"),
        _result("ry", "toolu_y", "written test_merge.py"),
        _reply("a3", "msg_3", {"type": "text", "text": "MergeSort and its test are written."}),
    ]
    parents = {"a1": "u1", "u2a": "a1", "a2a": "u2a", "u2b": "a1", "a2b": "u2b",
               "a2c": "a2b", "rx": "a2b", "ry": "a2c", "a3": "ry"}
    path = _write_jsonl(tmp_path / "fork.jsonl", _linked(records, parents))
    log = load_agent_log(path, "claude-code")
    texts = [m.get("content") for m in log.messages]
    assert "QuickSort" not in texts and "Here is QuickSort." not in texts
    assert [m["role"] for m in log.messages] == ["user", "assistant", "user", "assistant", "tool",
                                                 "tool", "assistant"]
    assert [c["id"] for c in log.messages[3]["tool_calls"]] == ["toolu_x", "toolu_y"]
    assert log.skipped["other branch"] == 2
    assert provider_problems(log.messages, "anthropic") == []
    # links that do not lead back to the first record (a broken chain): every record counts
    broken = dict(parents, a1="nowhere")
    log = load_agent_log(_write_jsonl(tmp_path / "broken.jsonl", _linked(records, broken)),
                         "claude-code")
    assert "QuickSort" in [m.get("content") for m in log.messages]
    assert "other branch" not in log.skipped


def test_a_directory_imports_every_transcript_and_a_bad_file_does_not_stop_the_rest(
        tmp_path: Path) -> None:
    """`refold import ~/.claude/projects`: one session per file, whatever its format; a file
    that fails is reported, the others are imported, the exit status says one failed."""
    home, folder = tmp_path / "home", tmp_path / "projects"
    (folder / "proj-a").mkdir(parents=True)
    (folder / "proj-b").mkdir()
    _write_jsonl(folder / "proj-a" / "s-1.jsonl", CLAUDE_CODE)
    _write_jsonl(folder / "proj-b" / "rollout-1.jsonl", CODEX)
    _write_jsonl(folder / "plain.jsonl", [{"role": "user", "content": "a plain transcript"}])
    (folder / "proj-b" / "broken.jsonl").write_text("{not json\n", encoding="utf-8")
    (folder / "empty.jsonl").write_text("", encoding="utf-8")
    first = _refold(home, "import", str(folder))
    assert first.returncode == 1, first.stderr
    assert "3 of 4 file(s) imported: 19 message(s) stored" in first.stdout
    assert "broken.jsonl" in first.stderr and "Traceback" not in first.stderr
    again = _refold(home, "import", str(folder), "--json")
    reports = json.loads(again.stdout)
    assert [r.get("appended") for r in reports if "error" not in r] == [0, 0, 0]
    assert sum("error" in r for r in reports) == 1
    named = _refold(home, "import", str(folder), "--title", "x")
    assert named.returncode == 2 and "a directory holds many" in named.stderr


def test_an_agent_session_is_titled_by_its_first_request() -> None:
    from refold.messages.agent_logs import agent_title

    wrapped = [{"role": "user", "content": "<environment_context>cwd /p</environment_context>"},
               {"role": "user", "content": "Caveat: The messages below were generated by the user"},
               {"role": "user", "content": "  Fix the flaky\n test in tests/test_io.py  "}]
    assert agent_title(wrapped) == "Fix the flaky test in tests/test_io.py"
    long = [{"role": "user", "content": "Work on bead spotter-a0y. Run bd show spotter-a0y to "
                                        "see the issue details and bd ready to find tasks."}]
    title = agent_title(long)
    assert title is not None and title.endswith("…") and len(title) <= 61
    assert title.startswith("Work on bead spotter-a0y. Run bd show")
    assert agent_title([{"role": "assistant", "content": "hi"}]) is None


def test_odd_ids_and_times_in_a_record_cost_nothing_but_themselves(tmp_path: Path) -> None:
    """A lone surrogate in the agent's session id and in the text, and a timestamp that is not
    one: the message is imported (text repaired to U+FFFD, time = the import's)."""
    path = tmp_path / "odd.jsonl"
    path.write_text(json.dumps({"type": "user", "uuid": "u1", "sessionId": "bad\ud800id",
                                "timestamp": "garbage",
                                "message": {"role": "user", "content": "hi \ud800 there"}})
                    + "\n", encoding="utf-8")
    done = _refold(tmp_path / "home", "import", str(path), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["appended"] == 1


def _spent(mid: str, output: int, *, cached: int = 0, written: int = 0) -> dict[str, Any]:
    return {"input_tokens": 3, "cache_creation_input_tokens": written,
            "cache_read_input_tokens": cached, "output_tokens": output,
            "service_tier": "standard"}


def _with_usage(record: dict[str, Any], usage: dict[str, Any]) -> dict[str, Any]:
    return {**record, "message": {**record["message"], "usage": usage}}


def test_each_claude_code_reply_is_charged_once_with_its_last_records_usage(
        tmp_path: Path) -> None:
    """Claude Code writes one API reply as several records, each with the usage so far (the
    output count grows; real transcripts: 10, 10, …, 441). The reply is charged once, with
    the last; a subagent's records and an interrupted reply (nothing left to read) are not
    lost or double-counted: the latter is charged to the reply before it."""
    records = [
        _cc("user", "u1", {"role": "user", "content": "Fix the rounding"}),
        _with_usage(_reply("a1", "msg_A", {"type": "text", "text": "Looking."}),
                    _spent("msg_A", 10, cached=100, written=50)),
        _with_usage(_reply("a2", "msg_A", _use("toolu_1", "Bash", command="pytest")),
                    _spent("msg_A", 441, cached=100, written=50)),
        _result("r1", "toolu_1", "1 failed"),
        _with_usage(_reply("a3", "msg_B", {"type": "text", "text": "Fixed."}),
                    _spent("msg_B", 20, cached=150)),
        _with_usage(_cc("assistant", "side", {"id": "msg_S", "role": "assistant",
                                              "model": "claude-opus-4",
                                              "content": [{"type": "text", "text": "sub"}]},
                        isSidechain=True), _spent("msg_S", 999)),
        _cc("user", "u2", {"role": "user", "content": "Thanks"}),
        _with_usage(_reply("a4", "msg_C", {"type": "text", "text": "  "}),  # interrupted
                    _spent("msg_C", 7)),
    ]
    log = load_agent_log(_write_jsonl(tmp_path / "s.jsonl", records), "claude-code")
    assert [m["role"] for m in log.messages] == ["user", "assistant", "tool", "assistant",
                                                 "user"]
    assert log.spend is not None
    outputs = [[u["output_tokens"] for u, _ in calls] for calls in log.spend]
    assert outputs == [[], [441], [], [20, 7], []]
    assert {model for calls in log.spend for _, model in calls} == {"claude-opus-4"}


def test_a_codex_rollout_charges_each_reported_call_once(tmp_path: Path) -> None:
    """Codex reports each model call in a ``token_count`` event after its items, and repeats
    the event (same totals) when only its rate limits changed: counted once, on the message
    the call wrote, with the model of the turn."""
    def count(last: int, total: int) -> dict[str, Any]:
        return _codex("event_msg", {"type": "token_count", "info": {
            "total_token_usage": {"input_tokens": total, "output_tokens": 10},
            "last_token_usage": {"input_tokens": last, "cached_input_tokens": last // 2,
                                 "output_tokens": 5, "reasoning_output_tokens": 2}}})
    records = [*CODEX[:7], count(1000, 1000), count(1000, 1000), *CODEX[7:-2],
               CODEX[-2], count(1200, 2200)]
    log = load_agent_log(_write_jsonl(tmp_path / "rollout-u.jsonl", records), "codex")
    assert log.spend is not None and len(log.spend) == len(log.messages)
    charged = [(n, u["prompt_tokens"], u["prompt_tokens_details"]["cached_tokens"], model)
               for n, calls in enumerate(log.spend) for u, model in calls]
    last = len(log.messages) - 1
    assert [c[1:] for c in charged] == [(1000, 500, "gpt-5-codex"), (1200, 600, "gpt-5-codex")]
    assert log.messages[charged[0][0]]["role"] == "assistant"  # the call's own message
    assert charged[1][0] == last and log.messages[last]["role"] == "assistant"


def test_import_adds_an_agents_token_use_once_and_a_grown_file_only_its_new_calls(
        tmp_path: Path) -> None:
    """`refold sessions list` showed imported Claude Code sessions with no tokens and no cost.
    Now their usage is added in the import's own transaction, for the messages it stores: a
    second import adds nothing, a grown file only the new reply."""
    home = tmp_path / "home"
    first = [
        _cc("user", "u1", {"role": "user", "content": "Fix the rounding"}),
        _with_usage(_reply("a1", "msg_A", {"type": "text", "text": "Fixed it."}),
                    _spent("msg_A", 400, cached=1000, written=200)),
    ]
    path = _write_jsonl(tmp_path / "s-usage.jsonl", first)

    def totals() -> tuple[int, int, int, float, str | None]:
        store = open_store(str(home / "refold.db"))
        try:
            (s,) = store.list_sessions()
        finally:
            store.close()
        return s.input_tokens, s.output_tokens, s.cache_read_tokens, s.cost_usd, s.model

    for _ in range(2):
        done = _refold(home, "import", str(path))
        assert done.returncode == 0, done.stderr
        tokens_in, tokens_out, cached, cost, model = totals()
        # input counts the cached and written parts, as refold counts a proxied reply's
        assert (tokens_in, tokens_out, cached, model) == (1203, 400, 1000, "claude-opus-4")
        # claude-opus-4 at $15 / $75 / $1.50 cache read / $18.75 cache write per million
        assert cost == pytest.approx((3 * 15 + 400 * 75 + 1000 * 1.5 + 200 * 18.75) / 1e6)
    _write_jsonl(path, [*first, _cc("user", "u2", {"role": "user", "content": "Push it"}),
                        _with_usage(_reply("a2", "msg_B", {"type": "text", "text": "Pushed."}),
                                    _spent("msg_B", 30, cached=1400))])
    assert _refold(home, "import", str(path)).returncode == 0
    assert totals()[:3] == (1203 + 1403, 430, 2400)
    listed = json.loads(_refold(home, "sessions", "list", "--json").stdout)
    assert listed[0]["input_tokens"] == 2606
    # begun when its first message was said (listed among the others by that, not by when
    # it was imported)
    assert listed[0]["started_at"] == 1770842205.693


def _gem(mid: str, kind: str, content: Any, **extra: Any) -> dict[str, Any]:
    return {"id": mid, "timestamp": "2025-12-06T15:00:10.000Z", "type": kind,
            "content": content, **extra}


GEMINI_HEADER = {"sessionId": "gem-001", "projectHash": "ab" * 32,
                 "startTime": "2025-12-06T15:00:00.000Z",
                 "lastUpdated": "2025-12-06T15:05:00.000Z"}
GEMINI = [
    _gem("g1", "user", "Change the port in config.json to 9000"),
    _gem("g2", "gemini", "I'll read it first.", model="gemini-2.5-pro",
         thoughts=[{"subject": "Plan", "description": "read, then edit"}],
         tokens={"input": 100, "output": 50, "cached": 40, "thoughts": 15, "tool": 20,
                 "total": 185},
         toolCalls=[
             {"id": "read_file-1", "name": "read_file", "args": {"file_path": "config.json"},
              "status": "success", "result": [{"functionResponse": {
                  "id": "read_file-1", "name": "read_file",
                  "response": {"output": '{"port": 8080}'}}}]},
             {"id": "replace-1", "name": "replace", "args": {"old": "8080", "new": "9000"},
              "status": "error", "result": [{"functionResponse": {
                  "id": "replace-1", "name": "replace",
                  "response": {"error": "0 occurrences found"}}}]}]),
    _gem("g3", "info", "Request cancelled."),
    _gem("g4", "user", [{"text": "Try again"}]),
    _gem("g5", "gemini", "Done: the port is 9000.", model="gemini-2.5-pro",
         tokens={"input": 300, "output": 20, "cached": 100, "thoughts": 0, "tool": 0}),
]


@pytest.mark.parametrize("layout", ["document", "jsonl"])
def test_a_gemini_cli_session_becomes_the_turns_its_model_saw(tmp_path: Path,
                                                              layout: str) -> None:
    """Gemini CLI keeps a session as one JSON document (``session-*.json``); a JSONL copy
    (the header line, then one message per line) reads the same. Tool calls and their results
    live inside the reply: they become tool calls followed by results, in call order; the
    CLI's notices and the reply's thought summaries are left out and counted."""
    if layout == "document":
        path = tmp_path / "session-2025-12-06T15-00-gem00001.json"
        path.write_text(json.dumps({**GEMINI_HEADER, "messages": GEMINI}, indent=2),
                        encoding="utf-8")
    else:
        path = _write_jsonl(tmp_path / "gem.jsonl", [GEMINI_HEADER, *GEMINI])
    assert sniff_agent_log(path) == "gemini"  # not Claude Code, whose records carry sessionId
    headerless = _write_jsonl(tmp_path / "no-header.jsonl",
                              [{**GEMINI[0], "sessionId": "gem-001"}, *GEMINI[1:]])
    assert sniff_agent_log(headerless) == "gemini"
    assert all(detect(r) == "claude-code" for r in CLAUDE_CODE[2:4])  # theirs stay theirs
    log = load_agent_log(path, "gemini")
    shape = [(m["role"], m.get("tool_call_id"), [c["id"] for c in m.get("tool_calls") or []])
             for m in log.messages]
    assert shape == [("user", None, []), ("assistant", None, ["read_file-1", "replace-1"]),
                     ("tool", "read_file-1", []), ("tool", "replace-1", []),
                     ("user", None, []), ("assistant", None, [])]
    assert log.messages[3]["content"] == "0 occurrences found"  # the error is what it said
    assert json.loads(log.messages[1]["tool_calls"][1]["function"]["arguments"]) == {
        "old": "8080", "new": "9000"}
    assert log.skipped == {"thoughts": 1, "info": 1} and log.native_id == "gem-001"
    assert provider_problems(log.messages, "openai") == []
    assert provider_problems(log.messages, "anthropic") == []
    assert log.spend is not None
    usage = [(u["prompt_tokens"], u["completion_tokens"],
              u["prompt_tokens_details"]["cached_tokens"], model)
             for calls in log.spend for u, model in calls]
    # the prompt with the tool-use prompt; the output with the thinking (billed as output)
    assert usage == [(120, 65, 40, "gemini-2.5-pro"), (300, 20, 100, "gemini-2.5-pro")]


def test_refold_import_reads_gemini_sessions_in_a_directory_and_skips_prompt_histories(
        tmp_path: Path) -> None:
    """`refold import ~/.gemini/tmp` finds the session documents (not the CLI's other .json
    files); `refold import ~/.codex` skips Codex's prompt history instead of failing on it,
    and importing that file alone says what it is."""
    home = tmp_path / "home"
    chats = tmp_path / "tmp" / ("ab" * 32) / "chats"
    chats.mkdir(parents=True)
    (chats / "session-2025-12-06T15-00-gem00001.json").write_text(
        json.dumps({**GEMINI_HEADER, "messages": GEMINI}, indent=2), encoding="utf-8")
    (chats.parent / "logs.json").write_text(json.dumps(
        [{"sessionId": "gem-001", "messageId": 0, "type": "user", "message": "hi"}]))
    history = _write_jsonl(tmp_path / "tmp" / "history.jsonl", [
        {"session_id": "c-1", "ts": 1759848400, "text": "list the project structure"}])
    done = _refold(home, "import", str(tmp_path / "tmp"))
    assert done.returncode == 0, done.stderr
    assert "1 of 1 file(s) imported: 6 message(s) stored" in done.stdout
    assert "prompt history" in done.stderr and "Traceback" not in done.stderr
    listed = json.loads(_refold(home, "sessions", "list", "--json").stdout)
    assert [(s["source"], s["title"], s["input_tokens"], s["model"]) for s in listed] == [
        ("gemini", "Change the port in config.json to 9000", 420, "gemini-2.5-pro")]
    alone = _refold(home, "import", str(history))
    assert alone.returncode == 2 and "Codex's prompt history" in alone.stderr
    assert "~/.codex/sessions" in alone.stderr and "Traceback" not in alone.stderr


def test_odd_usage_in_a_transcript_counts_nothing_and_costs_no_message(tmp_path: Path) -> None:
    """A transcript's usage is data like any other: 1e300, NaN-like strings, negative counts
    add nothing (1e300 overflowed SQLite's INTEGER and failed the import)."""
    home = tmp_path / "home"
    path = _write_jsonl(tmp_path / "odd.jsonl", [
        _cc("user", "u1", {"role": "user", "content": "hi"}),
        _with_usage(_reply("a1", "msg_A", {"type": "text", "text": "hello"}),
                    {"input_tokens": 1e300, "output_tokens": "many",
                     "cache_read_input_tokens": -4, "cache_creation_input_tokens": 10**40})])
    done = _refold(home, "import", str(path), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["appended"] == 2
    listed = json.loads(_refold(home, "sessions", "list", "--json").stdout)
    assert (listed[0]["input_tokens"], listed[0]["output_tokens"]) == (0, 0)


def test_two_imports_of_one_transcript_at_once_count_its_usage_once(tmp_path: Path) -> None:
    """Two `refold import` processes on the same file at the same moment (a cron job and a
    user): one session, each message once, its tokens once."""
    home = tmp_path / "home"
    path = _write_jsonl(tmp_path / "s-race.jsonl", [
        _cc("user", "u1", {"role": "user", "content": "Fix the rounding"}),
        _with_usage(_reply("a1", "msg_A", {"type": "text", "text": "Fixed it."}),
                    _spent("msg_A", 400, cached=1000, written=200))])
    command = [sys.executable, "-m", "refold.cli.main", "--home", str(home), "import",
               str(path)]
    runs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True) for _ in range(2)]
    for run in runs:
        _, err = run.communicate(timeout=60)
        assert run.returncode == 0, err
    listed = json.loads(_refold(home, "sessions", "list", "--json").stdout)
    assert [(s["message_count"], s["input_tokens"], s["output_tokens"]) for s in listed] == [
        (2, 1203, 400)]


def _turns(sid: str, first: int, count: int, parent: str | None, said: str
           ) -> list[dict[str, Any]]:
    """``count`` turns of Claude Code session ``sid`` (a question, a reply with its usage),
    linked from ``parent``."""
    out: list[dict[str, Any]] = []
    for n in range(first, first + count):
        out += [_cc("user", f"u{n}", {"role": "user", "content": f"{said} question {n}"},
                    parentUuid=parent, sessionId=sid),
                _with_usage(_reply(f"a{n}", f"msg_{n}", {"type": "text", "text": f"answer {n}"}),
                            _spent(f"msg_{n}", 100)) | {"parentUuid": f"u{n}", "sessionId": sid}]
        parent = f"a{n}"
    return out


def test_two_resumes_of_one_session_are_branches_of_it_and_import_again_as_nothing(
        tmp_path: Path) -> None:
    """Claude Code resumed a session twice: each resume is a file of its own under its own
    sessionId that starts with the resumed session's records (under that one's sessionId).
    All three were put into the session the first record names: the second resume rewound
    the first's turns and every folder import stored one of them again (16 rows a run, the
    other resume's turns not searchable, its tokens added again each time). Now each resume
    is its own session, a branch of the one it resumed sharing its turns: the folder imported
    again, in any order, stores nothing, and every turn is stored and found once."""
    original = _turns("sess-A", 0, 3, None, "original")
    folder = tmp_path / "projects" / "-p"
    folder.mkdir(parents=True)
    _write_jsonl(folder / "a.jsonl", original)
    _write_jsonl(folder / "b.jsonl", [*original, *_turns("sess-B", 10, 2, "a2", "monday")])
    _write_jsonl(folder / "c.jsonl", [*original, *_turns("sess-C", 20, 2, "a2", "tuesday")])

    def folder_import(home: Path) -> int:
        done = _refold(home, "import", str(tmp_path / "projects"), "--json")
        assert done.returncode == 0, done.stderr
        reports = json.loads(done.stdout)
        assert not any(r["rewound"] for r in reports)
        return sum(r["appended"] for r in reports)

    def ledger(home: Path) -> tuple[list[tuple[int, int]], int]:
        store = open_store(str(home / "refold.db"))
        try:
            sessions = store.list_sessions()
            rows = [store.get_messages(s.id, include_inactive=True) for s in sessions]
        finally:
            store.close()
        assert all(m.active for found in rows for m in found)  # nothing rewound
        return (sorted((s.message_count, s.output_tokens) for s in sessions),
                sum(s.output_tokens for s in sessions))

    home = tmp_path / "home"
    assert [folder_import(home) for _ in range(3)] == [6 + 4 + 4, 0, 0]
    # the original's 6 messages, each resume's 6 copies of them (in the branch) and its 4
    counts, tokens = ledger(home)
    assert counts == [(6, 300), (10, 200), (10, 200)] and tokens == 7 * 100
    for word, turns in (("monday", 2), ("tuesday", 2), ("original", 3)):
        found = json.loads(_refold(home, "search", word, "--json").stdout)
        assert len(found) == turns, word  # the original's turns once, not once per resume

    other = tmp_path / "other"  # the resumes first, one by one: the same ledger
    for name in ("c", "b", "a", "c"):
        assert _refold(other, "import", str(folder / f"{name}.jsonl")).returncode == 0
    assert folder_import(other) == 0 and ledger(other) == ledger(home)

    # a resume that went on adds only its new turns, to its own session
    _write_jsonl(folder / "b.jsonl", [*original, *_turns("sess-B", 10, 3, "a2", "monday")])
    assert folder_import(home) == 2
    assert ledger(home)[0] == [(6, 300), (10, 200), (12, 300)]


@pytest.mark.parametrize("fmt", ["claude-code", "codex"])
def test_a_transcript_imported_while_its_agent_wrote_it_is_charged_as_imported_whole(
        tmp_path: Path, fmt: str) -> None:
    """Imported while the agent was still writing it, then again as it ended: the totals of
    one import of the whole file. Claude Code cut inside a reply: the cut reply was rewound
    by the whole one and its usage stayed counted besides the whole reply's (13,200 tokens
    for 12,000). Codex cut before the last ``token_count``: the late call, on a message
    already stored, was never added (3000 input tokens for 4500)."""
    if fmt == "claude-code":
        records = [_cc("user", "u1", {"role": "user", "content": "Fix the rounding"}),
                   _with_usage(_reply("a1", "msg_A", {"type": "text", "text": "Looking."}),
                               _spent("msg_A", 10)),
                   _with_usage(_reply("a2", "msg_A", _use("toolu_1", "Bash", command="make")),
                               _spent("msg_A", 441)),
                   _result("r1", "toolu_1", "ok"),
                   _with_usage(_reply("a3", "msg_B", {"type": "text", "text": "Fixed."}),
                               _spent("msg_B", 20))]
        cut = 2  # inside the first reply
    else:
        def count(last: int, total: int) -> dict[str, Any]:
            return _codex("event_msg", {"type": "token_count", "info": {
                "total_token_usage": {"input_tokens": total, "output_tokens": 10},
                "last_token_usage": {"input_tokens": last, "output_tokens": 5}}})
        records = [*CODEX[:7], count(1000, 1000), *CODEX[7:-2], CODEX[-2],
                   count(1200, 2200)]
        cut = len(records) - 1  # before the last call's token_count

    def totals(home: Path) -> tuple[int, int, float]:
        (listed,) = json.loads(_refold(home, "sessions", "list", "--json").stdout)
        return listed["input_tokens"], listed["output_tokens"], round(listed["cost_usd"], 9)

    whole = _write_jsonl(tmp_path / "whole.jsonl", records)
    assert _refold(tmp_path / "once", "import", str(whole)).returncode == 0
    live = tmp_path / "live.jsonl"
    _write_jsonl(live, records[:cut])
    assert _refold(tmp_path / "twice", "import", str(live)).returncode == 0
    _write_jsonl(live, records)
    for _ in range(2):
        done = _refold(tmp_path / "twice", "import", str(live))
        assert done.returncode == 0, done.stderr
        assert totals(tmp_path / "twice") == totals(tmp_path / "once")
    assert totals(tmp_path / "once")[0] > 0
