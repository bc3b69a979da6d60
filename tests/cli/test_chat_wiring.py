"""Settings that reach the runtime through ``refold chat``: the llm summarizer (and its builtin
fallback) and ``rotate_on_compaction``, against the scripted model server."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from refold.cli.main import cli
from refold.compaction.llm_summarizer import SYSTEM_INSTRUCTION
from refold.store.sqlite import SQLiteStore
from refold.testing import ScriptedReply, serve

SUMMARY = "## Goal\nShip the build.\n## Progress\n### Done\n- modules compiled"
FILLER = "The build log said: step N compiled module alpha beta gamma delta. " * 36


def is_summary_request(body: dict[str, Any]) -> bool:
    first = body["messages"][0]
    return first.get("role") == "system" and first.get("content") == SYSTEM_INSTRUCTION


def upstream(summary: ScriptedReply) -> Callable[[dict[str, Any]], ScriptedReply]:
    def reply(body: dict[str, Any]) -> ScriptedReply:
        return summary if is_summary_request(body) else ScriptedReply(content="noted")
    return reply


def chat(home: Path, upstream_url: str, turns: int, env: dict[str, str]) -> Result:
    lines = [f"turn {i}: " + FILLER.replace("N", str(i)) for i in range(turns)]
    return CliRunner().invoke(
        cli, ["--home", str(home), "chat", "--upstream", upstream_url, "--context-length",
              "8000", "--no-tools", "--title", "build"],
        input="\n".join([*lines, "/quit"]) + "\n",
        env={"REFOLD_UPSTREAM": None, **env}, catch_exceptions=False)


def checkpoints(home: Path) -> list[Any]:
    store = SQLiteStore(str(home / "refold.db"))
    try:
        return [c for s in store.list_sessions() for c in store.list_checkpoints(s.id)]
    finally:
        store.close()


LLM_ENV = {"REFOLD_SUMMARIZER": "llm", "REFOLD_SUMMARIZER_MODEL": "summary-model"}


def test_chat_with_the_llm_summarizer_writes_an_llm_checkpoint(tmp_path: Path) -> None:
    with serve(default=upstream(ScriptedReply(content=SUMMARY))) as up:
        result = chat(tmp_path, up.base_url, 12, LLM_ENV)
        bodies = list(up.llm.requests)
    assert result.exit_code == 0, result.output
    assert any(is_summary_request(b) and b["model"] == "summary-model" for b in bodies)
    found = checkpoints(tmp_path)
    assert found and found[0].summarizer == "llm:summary-model" and found[0].status == "ok"


def test_chat_falls_back_to_builtin_when_the_summary_model_fails(tmp_path: Path) -> None:
    broken = ScriptedReply(status=500, error={"error": {"message": "boom"}})
    with serve(default=upstream(broken)) as up:
        result = chat(tmp_path, up.base_url, 12, LLM_ENV)
        bodies = list(up.llm.requests)
    assert result.exit_code == 0, result.output
    assert any(is_summary_request(b) for b in bodies)
    found = checkpoints(tmp_path)
    assert found and found[0].summarizer == "builtin" and found[0].status == "fallback"
    # the user is told once, and the summary model is not asked again during its cooldown
    told = [line for line in result.output.splitlines() if line.startswith("warning:")]
    assert len(told) == 1 and "summary-model" in told[0] and "not asked again" in told[0]
    assert sum(1 for b in bodies if is_summary_request(b)) == 2  # summary model, then main


def test_chat_with_rotate_on_compaction_continues_in_a_child(tmp_path: Path) -> None:
    with serve(default=upstream(ScriptedReply(content=SUMMARY))) as up:
        result = chat(tmp_path, up.base_url, 12, {"REFOLD_ROTATE_ON_COMPACTION": "true"})
    assert result.exit_code == 0, result.output
    store = SQLiteStore(str(tmp_path / "refold.db"))
    try:
        titles = {s.title: s for s in store.list_sessions()}
        assert "build" in titles and "build #2" in titles
        assert titles["build"].end_reason == "compaction"
        child = store.resolve_resume(titles["build"].id)
        last = store.get_messages(child.id)[-2:]
        assert [r.role for r in last] == ["user", "assistant"]
        assert str(last[0].message["content"]).startswith("turn 11:")
    finally:
        store.close()


def test_chat_tools_follow_the_session_into_the_compaction_child(tmp_path: Path) -> None:
    import json

    from refold.tools.todo import EVENT_KIND

    call = {"id": "call_t", "type": "function", "function": {"name": "todo", "arguments":
            json.dumps({"todos": [{"id": "1", "content": "tag it", "status": "pending"}]})}}

    def reply(body: dict[str, Any]) -> ScriptedReply:
        if is_summary_request(body):
            return ScriptedReply(content=SUMMARY)
        last = body["messages"][-1]
        if last["role"] == "user" and str(last["content"]).startswith("make a todo"):
            return ScriptedReply(content=None, tool_calls=[call])
        return ScriptedReply(content="noted")

    lines = [f"turn {i}: " + FILLER.replace("N", str(i)) for i in range(12)]
    with serve(default=reply) as up:
        result = CliRunner().invoke(
            cli, ["--home", str(tmp_path), "chat", "--upstream", up.base_url,
                  "--context-length", "8000", "--title", "build"],
            input="\n".join([*lines, "make a todo", "/quit"]) + "\n",
            env={"REFOLD_UPSTREAM": None, "REFOLD_ROTATE_ON_COMPACTION": "true"},
            catch_exceptions=False)
    assert result.exit_code == 0, result.output
    store = SQLiteStore(str(tmp_path / "refold.db"))
    try:
        root = next(s for s in store.list_sessions() if s.title == "build")
        child = store.resolve_resume(root.id)
        assert child.id != root.id
        assert store.list_events(child.id, EVENT_KIND)  # written where the chat now is
        assert not store.list_events(root.id, EVENT_KIND)
    finally:
        store.close()
