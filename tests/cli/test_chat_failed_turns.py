"""``refold chat``: a turn that fails or is interrupted before its reply is recorded takes its
user message back (a reversible rewind), so typing it again asks once; a turn that fails after
a tool-call reply keeps what was recorded, and the ledger stays a history a provider accepts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from refold.cli.chat import Renderer
from refold.cli.main import cli
from refold.store.sqlite import SQLiteStore
from refold.testing import ScriptedReply, serve
from refold.tools import ToolRegistry

NOT_IN = "your message was not answered and is not in the conversation"
TODO_CALL = {"id": "call_1", "type": "function", "function": {
    "name": "todo", "arguments": json.dumps({"todos": [
        {"id": "1", "content": "write the report", "status": "in_progress"}]})}}


def chat(home: Path, upstream: str, lines: list[str], *extra: str) -> Result:
    return CliRunner().invoke(cli, ["--home", str(home), "chat", "--upstream", upstream,
                                    "--context-length", "100000", *extra],
                              input="\n".join(lines) + "\n", env={"REFOLD_UPSTREAM": None},
                              catch_exceptions=False)


def conversation(body: dict[str, Any]) -> list[tuple[str, str]]:
    """(role, content or the tool calls' ids) of a request, system prompt left out."""
    return [(m["role"], str(m.get("content") or [c["id"] for c in m.get("tool_calls") or []]))
            for m in body["messages"] if m["role"] != "system"]


def stored(home: Path) -> list[tuple[str, str]]:
    store = SQLiteStore(str(home / "refold.db"))
    try:
        (session,) = store.list_sessions()
        return [(r.role, str(r.message.get("content") or "")) for r in
                store.get_messages(session.id)]
    finally:
        store.close()


@pytest.mark.parametrize("failure", [ScriptedReply(status=500),
                                     ScriptedReply(drop_connection=True)],
                         ids=["http-500", "dropped-connection"])
def test_a_failed_turn_takes_its_message_back_so_the_retry_asks_once(
        tmp_path: Path, failure: ScriptedReply) -> None:
    """The tester's request after a failed turn and its retry: user "ERR500 please", user
    "ERR500 please", user "third" back to back."""
    with serve(["hello back", failure, "answered", "fine"]) as up:
        result = chat(tmp_path, up.base_url, ["hello", "ERR500 please", "ERR500 please",
                                              "third"], "--no-tools")
        requests = [conversation(r) for r in up.llm.requests]
    assert result.exit_code == 0, result.output
    assert requests[-1] == [("user", "hello"), ("assistant", "hello back"),
                            ("user", "ERR500 please"), ("assistant", "answered"),
                            ("user", "third")]
    assert requests[-2] == [("user", "hello"), ("assistant", "hello back"),
                            ("user", "ERR500 please")]  # the retry asks once
    assert stored(tmp_path) == [("user", "hello"), ("assistant", "hello back"),
                                ("user", "ERR500 please"), ("assistant", "answered"),
                                ("user", "third"), ("assistant", "fine")]
    assert "error:" in result.output and NOT_IN in result.output
    assert result.output.count(NOT_IN) == 1  # only the failed turn says so


def test_the_taken_back_message_is_a_reversible_rewind(tmp_path: Path) -> None:
    with serve([ScriptedReply(status=500)]) as up:
        result = chat(tmp_path, up.base_url, ["lost one"], "--no-tools")
    assert result.exit_code == 0, result.output
    assert "rewind #1, reversible" in result.output
    store = SQLiteStore(str(tmp_path / "refold.db"))
    try:
        (session,) = store.list_sessions()
        assert store.get_messages(session.id) == []
        (rewind,) = store.list_rewinds(session.id)
        store.undo_rewind(rewind.record.id)
        assert [r.message["content"] for r in store.get_messages(session.id)] == ["lost one"]
    finally:
        store.close()


def test_ctrl_c_mid_reply_takes_the_message_back(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    on_text = Renderer.on_text

    def interrupted(self: Renderer, delta: str) -> None:
        if "slow" in delta:
            raise KeyboardInterrupt  # Ctrl-C while the reply streams in
        on_text(self, delta)

    monkeypatch.setattr(Renderer, "on_text", interrupted)
    with serve(["slow reply " * 5, "quick reply"]) as up:
        result = chat(tmp_path, up.base_url, ["tell me", "tell me"], "--no-tools")
        last = conversation(up.llm.requests[-1])
    assert result.exit_code == 0, result.output
    assert last == [("user", "tell me")]
    assert stored(tmp_path) == [("user", "tell me"), ("assistant", "quick reply")]
    assert "error: interrupted" in result.output and NOT_IN in result.output


def test_a_failure_after_a_tool_call_keeps_the_recorded_turn(tmp_path: Path) -> None:
    """The tool-call reply and its results stay (nothing recorded is rewound); the next turn
    follows them with no repair."""
    with serve([ScriptedReply(content=None, tool_calls=[TODO_CALL]), ScriptedReply(status=500),
                "carrying on"]) as up:
        result = chat(tmp_path, up.base_url, ["plan the report", "go on"])
        last = conversation(up.llm.requests[-1])
    assert result.exit_code == 0, result.output
    assert NOT_IN not in result.output
    assert "your message and the tool results stay in the conversation" in result.output
    assert "repaired" not in result.output
    assert [role for role, _ in last] == ["user", "assistant", "tool", "user"]
    assert [role for role, _ in stored(tmp_path)] == ["user", "assistant", "tool", "user",
                                                      "assistant"]


def test_ctrl_c_while_the_tools_run_records_their_results(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """Interrupted between the tool-call reply and its results: the call gets a result saying
    so, else every later request carried an unanswered call (repaired, with a warning)."""
    def interrupted(self: ToolRegistry, call: dict[str, Any]) -> dict[str, Any]:
        raise KeyboardInterrupt

    monkeypatch.setattr(ToolRegistry, "dispatch", interrupted)
    with serve([ScriptedReply(content=None, tool_calls=[TODO_CALL]), "fine"]) as up:
        result = chat(tmp_path, up.base_url, ["plan the report", "next"])
        last = up.llm.requests[-1]["messages"]
    assert result.exit_code == 0, result.output
    assert [m["role"] for m in last[1:]] == ["user", "assistant", "tool", "user"]
    assert last[3]["tool_call_id"] == "call_1" and "interrupted" in last[3]["content"]
    assert "error: interrupted" in result.output and "repaired" not in result.output
    assert stored(tmp_path)[-2:] == [("user", "next"), ("assistant", "fine")]


def test_the_last_tool_round_s_results_are_recorded(tmp_path: Path) -> None:
    """A turn stopped after its last tool round left that round's calls unanswered: every
    later request was repaired (a warning each turn)."""
    def calls(body: dict[str, Any]) -> ScriptedReply | str:
        if body["messages"][-1]["content"] == "next":
            return "fine"
        return ScriptedReply(content=None, tool_calls=[TODO_CALL])

    with serve(default=calls) as up:
        result = chat(tmp_path, up.base_url, ["loop", "next"])
        last = up.llm.requests[-1]["messages"]
    assert result.exit_code == 0, result.output
    assert "stopped after 8 tool rounds" in result.output
    assert [m["role"] for m in last[-3:]] == ["assistant", "tool", "user"]
    assert [role for role, _ in stored(tmp_path)][-4:] == ["assistant", "tool", "user",
                                                         "assistant"]
    assert "repaired" not in result.output
