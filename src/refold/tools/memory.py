"""The ``memory`` tool for agent loops: ``refold.memory``'s tool as a registry ``Tool``.

The memory layer owns the tool (its schema, its actions, its model-facing results and the
three-failures-per-turn stop); this module only adapts it to the registry so every surface
(agent loop, chat, MCP) dispatches it the same way. ``memory`` may be a ``MemoryTool``, or a
memory store / directory, from which a ``MemoryTool`` with the given approval mode is built.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from refold.tools.registry import Tool


def as_memory_tool(memory: Any, *, approval: str = "allow") -> Any:
    """A ``refold.memory.MemoryTool`` for ``memory`` (a tool, a store, or a directory)."""
    from refold.memory import MemoryStore, MemoryTool, MemoryWriter, open_file_store

    if isinstance(memory, MemoryTool):
        return memory
    tool = getattr(memory, "memory_tool", None)
    if isinstance(tool, MemoryTool):
        return tool
    if isinstance(memory, str | os.PathLike):
        memory = open_file_store(memory)
    if isinstance(memory, MemoryStore):
        return MemoryTool(MemoryWriter(memory, approval))
    raise TypeError(f"cannot make a memory tool from {type(memory).__name__}")


def memory_tool(memory: Any, *, approval: str = "allow",
                new_turn_after: float | None = None, reset_on_success: bool = False) -> Tool:
    """The ``memory`` registry tool over ``memory`` (see ``as_memory_tool``).

    An agent loop starts each turn with ``begin_turn()`` (the runtime does it), which resets
    the tool's three-failures-per-turn stop. Surfaces without turns (MCP) pass
    ``new_turn_after``: a call that many seconds after the previous one starts a new turn;
    with ``reset_on_success`` a successful call ends the chain of failures too, so the stop
    counts failures per call chain, never for the life of the server.
    """
    from refold.memory.tool import FAILURES_PER_TURN

    tool = as_memory_tool(memory, approval=approval)
    function = tool.schema()["function"]
    last_call = [0.0]

    def handler(args: dict[str, Any]) -> str:
        now = time.monotonic()
        if new_turn_after is not None and now - last_call[0] >= new_turn_after:
            tool.begin_turn()
        if tool.failures < FAILURES_PER_TURN:
            # the pause counts from the last call that ran: a call the stop refuses does not
            # restart it, or a client calling at least once a minute (a read, say) was
            # refused for as long as it kept calling
            last_call[0] = now
        text = str(tool.handle(args))
        if reset_on_success and not _failed(text):
            tool.begin_turn()
        return text

    return Tool(function["name"], function["description"], function["parameters"],
                handler, failed=_failed)


def _failed(text: str) -> bool:
    try:
        payload = json.loads(text)
    except ValueError:
        return False
    return isinstance(payload, dict) and payload.get("success") is False
