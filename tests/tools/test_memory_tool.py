"""The memory tool through the registry: writes reach disk, refusals are tool errors."""

from __future__ import annotations

import json
from pathlib import Path

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
