"""Tools for agents: ``session_search``, ``memory`` and ``todo`` as OpenAI function schemas.

    registry = agent_tools(store, session_id=rt.session_id, memory=engine.memory)
    prepared = rt.prepare(msgs, tools=registry.schemas())
    for call in reply["tool_calls"]: tool_msg = registry.dispatch(call)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from refold.store.base import Store
from refold.tools.memory import memory_tool
from refold.tools.registry import Tool, ToolRegistry, ToolResult, to_json
from refold.tools.session_search import SessionSearch, session_search_tool
from refold.tools.todo import (
    apply_todos,
    load_task_state,
    load_todos,
    render_task_state,
    render_todos,
    todo_tool,
)


def agent_tools(store: Store, *, session_id: str | Callable[[], str], owner: str | None = "",
                memory: Any | None = None, spill: Any | None = None,
                skills: Any | None = None) -> ToolRegistry:
    """The standard registry for one session: session_search, todo, and memory when given.

    ``session_id`` may be a getter (``lambda: rt.session_id``) so the tools follow a runtime
    that moves to a compaction child (``rotate_on_compaction``).
    """
    registry = ToolRegistry([session_search_tool(store, current_session_id=session_id,
                                                 owner=owner, spill=spill),
                             todo_tool(store, session_id)])
    if memory is not None:
        registry.register(memory_tool(memory))
    if skills is not None:
        from refold.skills import skill_manage_tool

        registry.register(skill_manage_tool(skills))
    return registry


__all__ = [
    "SessionSearch",
    "Tool",
    "ToolRegistry",
    "ToolResult",
    "agent_tools",
    "apply_todos",
    "load_task_state",
    "load_todos",
    "memory_tool",
    "render_task_state",
    "render_todos",
    "session_search_tool",
    "to_json",
    "todo_tool",
]
