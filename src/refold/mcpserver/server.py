"""An MCP server over stdio exposing refold's ``memory`` and ``session_search`` tools.

Any MCP-speaking agent (Claude Desktop, Cursor, Codex, …) can then keep MEMORY.md / USER.md and
search every session refold stored. The tools are the same ``refold.tools`` objects an agent
loop uses, so their schemas and results are identical on every surface. A tool error comes back
as an MCP result with ``is_error`` set and a one-line message, never as a crash of the server.

Blocking store and memory calls run on a worker thread so the stdio loop stays responsive.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server

from refold import __version__
from refold.tools.registry import ToolRegistry

log = logging.getLogger(__name__)

SERVER_NAME = "refold"
INSTRUCTIONS = (
    "refold keeps your long-term memory (MEMORY.md for your notes, USER.md for the user's "
    "profile and preferences) and an archive of past sessions. Use `memory` to save durable "
    "facts and preferences, and `session_search` to recall earlier work.")


def build_server(registry: ToolRegistry) -> Server[Any]:
    """A low-level MCP server whose tools are ``registry``'s tools."""

    async def list_tools(ctx: ServerRequestContext[Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        tools = [types.Tool(name=s["function"]["name"],
                            description=s["function"]["description"],
                            input_schema=s["function"]["parameters"])
                 for s in registry.schemas()]
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: ServerRequestContext[Any],
                        params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name not in registry:
            return _result(f"unknown tool {params.name!r}", error=True)
        arguments = dict(params.arguments or {})
        result = await anyio.to_thread.run_sync(registry.run, params.name, arguments)
        return _result(result.text, error=result.is_error)

    return Server(SERVER_NAME, version=__version__, instructions=INSTRUCTIONS,
                  on_list_tools=list_tools, on_call_tool=call_tool)


def _result(text: str, *, error: bool) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                is_error=error)


async def _serve_stdio(server: Server[Any]) -> None:
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def run_stdio(registry: ToolRegistry) -> None:
    """Serve ``registry`` over this process's stdin/stdout until the client disconnects."""
    anyio.run(_serve_stdio, build_server(registry))
