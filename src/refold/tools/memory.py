"""The ``memory`` tool for agent loops: ``refold.memory``'s schema and handler as a ``Tool``.

The memory layer owns the tool (its schema, its actions and its model-facing errors); this
module only adapts it to the registry so every surface (agent loop, chat, MCP) dispatches it the
same way.
"""

from __future__ import annotations

import json
from typing import Any

from refold.tools.registry import Tool


def memory_tool(memory: Any) -> Tool:
    """The ``memory`` tool over a ``MemoryManager`` (or anything with the manager's tool API)."""
    from refold.memory import MEMORY_TOOL_SCHEMA

    function = MEMORY_TOOL_SCHEMA["function"]

    def handler(args: dict[str, Any]) -> str:
        result = memory.handle_tool_call("memory", args)
        return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)

    return Tool(function["name"], function["description"], function["parameters"], handler)
