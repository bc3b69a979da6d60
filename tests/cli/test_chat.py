"""``refold chat`` driven with piped input against the scripted model server."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from refold.cli.chat import gauge_line
from refold.cli.main import cli
from refold.store.sqlite import SQLiteStore
from refold.testing import ScriptedReply, serve


def chat(home: Path, upstream: str, lines: list[str], *extra: str) -> Result:
    runner = CliRunner()
    return runner.invoke(cli, ["--home", str(home), "chat", "--upstream", upstream,
                               "--context-length", "100000", *extra],
                         input="\n".join(lines) + "\n", env={"REFOLD_UPSTREAM": None},
                         catch_exceptions=False)


def sessions(home: Path) -> list[tuple[str | None, list[tuple[str, str]]]]:
    store = SQLiteStore(str(home / "refold.db"))
    try:
        out = []
        for s in reversed(store.list_sessions()):
            rows = [(r.role, str(r.message.get("content") or "")) for r in
                    store.get_messages(s.id)]
            out.append((s.title, rows))
        return out
    finally:
        store.close()


def test_a_turn_prints_the_reply_and_a_gauge_and_is_stored(tmp_path: Path) -> None:
    with serve(["Hello! How can I help?"]) as up:
        result = chat(tmp_path, up.base_url, ["hi there", "/quit"], "--title", "first")
        sent = up.llm.requests[0]
    assert result.exit_code == 0, result.output
    out = result.output
    assert "Hello! How can I help?" in out
    assert "until compaction" in out and "window 100.0k" in out
    assert "bye" in out
    assert sessions(tmp_path) == [("first", [("user", "hi there"),
                                            ("assistant", "Hello! How can I help?")])]
    assert sent["messages"][0]["role"] == "system"
    assert {t["function"]["name"] for t in sent["tools"]} == {"session_search", "todo", "memory",
                                                             "skill_manage"}


def test_tool_calls_run_and_the_model_is_called_again(tmp_path: Path) -> None:
    call = {"id": "call_1", "type": "function", "function": {
        "name": "todo", "arguments": json.dumps({"todos": [
            {"id": "1", "content": "write the report", "status": "in_progress"}]})}}
    with serve([ScriptedReply(content=None, tool_calls=[call]), "Added it to the list."]) as up:
        result = chat(tmp_path, up.base_url, ["plan the report"])
        second = up.llm.requests[1]["messages"]
    assert result.exit_code == 0, result.output
    assert "⚙ todo(" in result.output and "Added it to the list." in result.output
    assert second[-1]["role"] == "tool" and "write the report" in second[-1]["content"]
    (_, rows), = sessions(tmp_path)
    assert [r for r, _ in rows] == ["user", "assistant", "tool", "assistant"]


def test_slash_commands_search_undo_new_resume_branch(tmp_path: Path) -> None:
    def answer(body: dict[str, Any]) -> str:
        return "echo: " + str(body["messages"][-1]["content"])

    with serve(default=answer) as up:
        result = chat(tmp_path, up.base_url, [
            "/help", "the parrot is blue", "a second line", "/undo", "/search parrot",
            "/new other", "something else", "/resume first", "/branch side", "/memory",
            "/context", "/nonsense", "/quit"], "--title", "first")
    assert result.exit_code == 0, result.output
    out = result.output
    for command in ("/compact", "/resume", "/search", "/memory", "/undo", "/branch", "/new"):
        assert command in out  # the help lists it
    assert "took back 2 message(s)" in out
    assert re.search(r"first #\d+ (user|assistant): .*parrot", out)
    assert "error: unknown command /nonsense" in out
    titles = [title for title, _ in sessions(tmp_path)]
    assert titles[:2] == ["first", "other"] and len(titles) == 3
    first_rows = dict((t, rows) for t, rows in sessions(tmp_path))["first"]
    assert first_rows == [("user", "the parrot is blue"), ("assistant", "echo: the parrot is blue")]


def test_resume_continues_the_same_session(tmp_path: Path) -> None:
    with serve(default=lambda body: "fine") as up:
        chat(tmp_path, up.base_url, ["one"], "--title", "keep")
        result = chat(tmp_path, up.base_url, ["two"], "--session", "keep")
        resent = up.llm.requests[-1]["messages"]
    assert result.exit_code == 0, result.output
    assert [m["content"] for m in resent if m["role"] == "user"] == ["one", "two"]
    (title, rows), = sessions(tmp_path)
    assert title == "keep" and len(rows) == 4


def test_context_of_a_resumed_session_counts_the_tools_before_the_first_turn(
        tmp_path: Path) -> None:
    """/context right after --session counted no tool schemas (the runtime learnt them from
    the first request): "tools 0 = 49 tokens" while the next request carried 1.4k."""
    with serve(default=lambda body: "fine") as up:
        chat(tmp_path, up.base_url, ["one"], "--title", "keep")
        result = chat(tmp_path, up.base_url, ["/context", "two", "/context"],
                      "--session", "keep")
    assert result.exit_code == 0, result.output
    before, after = re.findall(r"tools (\S+) .*= (\S+) tokens", result.output)
    assert before[0] not in ("0", "") and before[0] == after[0]  # the same schemas, counted
    total = float(before[1].rstrip("k")) * (1000 if before[1].endswith("k") else 1)
    assert total > 500  # the schemas of session_search, memory and todo are in it


def test_overflow_compacts_and_retries_in_chat(tmp_path: Path) -> None:
    filler = "The build log said: step N compiled module alpha beta gamma delta. " * 12
    lines = [f"note {i}: " + filler.replace("N", str(i)) for i in range(30)]
    with serve(default=lambda body: "ok") as up:
        chat(tmp_path, up.base_url, lines, "--title", "long", "--no-tools")
        full = len(json.dumps(up.llm.requests[-1]["messages"])) // 4
    limit = full * 45 // 100  # the model's real window is smaller than refold was told
    with serve(["compacted answer"], max_context_tokens=limit) as up:
        result = chat(tmp_path, up.base_url, ["where are we?"], "--session", "long",
                      "--no-tools", "--context-length", str(full * 16 // 9))
        sizes = [len(json.dumps(r["messages"])) // 4 for r in up.llm.requests]
    assert result.exit_code == 0, result.output
    assert "compacted answer" in result.output
    assert len(sizes) >= 2 and sizes[0] > limit >= sizes[-1]


def test_upstream_failure_prints_one_error_line_and_the_chat_goes_on(tmp_path: Path) -> None:
    with serve([ScriptedReply(status=500), "back again"]) as up:
        result = chat(tmp_path, up.base_url, ["first try", "second try"])
    assert result.exit_code == 0, result.output
    assert "error: upstream returned HTTP 500" in result.output
    assert "back again" in result.output


def test_gauge_line_shape() -> None:
    line = gauge_line(32_000, 64_000, 128_000)
    assert line.startswith("[" + "█" * 12 + "░" * 12 + "]")
    assert "32.0k / 64.0k until compaction · window 128.0k (25%)" in line
    assert gauge_line(0, 0, 0).startswith("[" + "░" * 24)


def test_the_model_saves_memory_and_the_next_session_sees_it(tmp_path: Path) -> None:
    call = {"id": "call_m", "type": "function", "function": {
        "name": "memory", "arguments": json.dumps(
            {"action": "add", "target": "user", "content": "Prefers answers in French."})}}
    with serve([ScriptedReply(content=None, tool_calls=[call]), "Noted.", "Bonjour !"]) as up:
        first = chat(tmp_path, up.base_url, ["I prefer French answers", "/memory"])
        second = chat(tmp_path, up.base_url, ["hello"])
        system = str(up.llm.requests[-1]["messages"][0]["content"])
    assert first.exit_code == 0 and second.exit_code == 0, first.output + second.output
    assert "⚙ memory(" in first.output
    assert "USER (1 entries)" in first.output and "Prefers answers in French." in first.output
    assert "Prefers answers in French." in system  # frozen into the next session's prompt


def test_compact_command_shrinks_the_context_and_keeps_every_message(tmp_path: Path) -> None:
    filler = "The build log said: step N compiled module alpha beta gamma delta. " * 12
    lines = [f"note {i}: " + filler.replace("N", str(i)) for i in range(30)]
    with serve(default=lambda body: "ok") as up:
        result = chat(tmp_path, up.base_url, [*lines, "/compact"], "--no-tools",
                      "--context-length", "12000")
    assert result.exit_code == 0, result.output
    match = re.search(r"compacted: (\d+) → (\d+) tokens", result.output)
    assert match and int(match.group(2)) < int(match.group(1)), result.output
    (_, rows), = sessions(tmp_path)
    assert len(rows) == 60  # compaction adds a checkpoint; the ledger keeps every message


def test_resume_without_a_name_goes_to_the_latest_other_session(tmp_path: Path) -> None:
    """``/resume`` alone ("latest if none") reopened the session it was typed in."""
    with serve(default=lambda body: "fine") as up:
        chat(tmp_path, up.base_url, ["about the parrot"], "--title", "earlier")
        result = chat(tmp_path, up.base_url, ["hello", "/resume", "and the parrot?"],
                      "--title", "now")
        resent = up.llm.requests[-1]["messages"]
    assert result.exit_code == 0, result.output
    assert "resumed" in result.output and "earlier" in result.output
    assert [m["content"] for m in resent if m["role"] == "user"] == [
        "about the parrot", "and the parrot?"]
    alone = CliRunner().invoke(cli, ["--home", str(tmp_path / "alone"), "chat", "--upstream",
                                     "http://127.0.0.1:9/v1", "--context-length", "100000"],
                               input="/resume\n", env={"REFOLD_UPSTREAM": None})
    assert "no other session to resume" in alone.output
