"""The memory tool through the registry: writes reach disk, refusals are tool errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from refold.store import Store
from refold.tools import agent_tools


def test_memory_through_agent_tools(sqlite_store: Store, tmp_path: Path) -> None:
    session = sqlite_store.create_session()
    registry = agent_tools(sqlite_store, session_id=session.id, memory=tmp_path / "mem")
    assert set(registry.names) == {"session_search", "todo", "memory"}
    ok = registry.run("memory", {"action": "add", "target": "user",
                                 "content": "用中文回答。Prefers pytest -q."})
    assert not ok.is_error and json.loads(ok.text)["success"] is True
    assert "用中文回答" in (tmp_path / "mem" / "USER.md").read_text(encoding="utf-8")
    bad = registry.run("memory", {"action": "remove", "target": "user", "old_text": "nothing"})
    assert bad.is_error
    read = json.loads(registry.call("memory", {"action": "read", "target": "user"}))
    assert read["success"] is True


def test_failure_budget_resets_after_a_pause(tmp_path: Path) -> None:
    from refold.tools import ToolRegistry, memory_tool

    bad = {"action": "remove", "target": "user", "old_text": "nothing"}
    per_turn = ToolRegistry([memory_tool(tmp_path / "a")])
    for _ in range(4):
        last = json.loads(per_turn.call("memory", bad))
    assert last.get("stop") is True  # three failures: the tool says stop
    paused = ToolRegistry([memory_tool(tmp_path / "b", new_turn_after=0.0)])
    for _ in range(4):
        last = json.loads(paused.call("memory", bad))
    assert not last.get("stop")  # every call starts a new "turn"


def test_calls_refused_by_the_stop_do_not_restart_its_pause(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """MCP has no turns: a pause of ``new_turn_after`` seconds ends the three-failure stop.
    Every refused call used to restart that pause, so a client reading memory at least once
    a minute after three failed writes was refused for as long as it kept calling."""
    from refold.tools import ToolRegistry, memory_tool
    from refold.tools import memory as module

    clock = [1000.0]
    monkeypatch.setattr(module.time, "monotonic", lambda: clock[0])
    registry = ToolRegistry([memory_tool(tmp_path / "m", new_turn_after=60.0)])
    for _ in range(3):
        assert json.loads(registry.call("memory", {"action": "add", "target": "memory",
                                                   "content": ""}))["success"] is False
    read = {"action": "read", "target": "memory"}
    for _ in range(2):  # refused, every 20 s
        clock[0] += 20.0
        assert json.loads(registry.call("memory", read)).get("stop") is True
    clock[0] += 21.0  # 61 s since the last call that ran (the third failure)
    answer = json.loads(registry.call("memory", read))
    assert answer["success"] is True and not answer.get("stop")
