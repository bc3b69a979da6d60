"""An MCP server over stdio exposing refold's ``memory`` and ``session_search`` tools.

Any MCP-speaking agent (Claude Desktop, Cursor, Codex, …) can then keep MEMORY.md / USER.md and
search every session refold stored. The tools are the same ``refold.tools`` objects an agent
loop uses, so their schemas and results are identical on every surface. A tool error comes back
as an MCP result with ``isError`` set and a one-line JSON ``{"error": ...}``, never as a crash
of the server (nor as the SDK's plain-text message for an exception).

Written against the mcp 1.x low-level API (``mcp>=1.19,<2``): handlers are registered with the
``Server`` decorators. Input validation stays with the tools (``validate_input=False``) so a
client sees the same one-line refusal on MCP as in an agent loop, not a jsonschema dump.

Blocking store and memory calls run on a worker thread so the stdio loop stays responsive.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import sys
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, cast

import anyio
import mcp.types as types
from mcp.server.lowlevel import Server

from refold import __version__
from refold._records import dataclass
from refold.messages.validate import SURROGATE_IN_JSON, repair_strings, repair_text
from refold.tools.registry import ToolRegistry, error_result

log = logging.getLogger(__name__)

SERVER_NAME = "refold"
INSTRUCTIONS = (
    "refold keeps your long-term memory (MEMORY.md for your notes, USER.md for the user's "
    "profile and preferences) and an archive of past sessions. Use `memory` to save durable "
    "facts and preferences, and `session_search` to recall earlier work.")


@dataclass(frozen=True)
class TextResource:
    """A read-only MCP resource whose text ``read`` produces on each request (so it is current:
    the memory snapshot after a write, the sessions stored since the server started)."""

    uri: str
    name: str
    description: str
    mime_type: str
    read: Callable[[], str]


def build_server(registry: ToolRegistry,
                 resources: Sequence[TextResource] = ()) -> Server[Any, Any]:
    """A low-level MCP server whose tools are ``registry``'s tools and whose resources are
    ``resources``."""
    server: Server[Any, Any] = Server(SERVER_NAME, version=__version__,
                                      instructions=INSTRUCTIONS)
    by_uri = {r.uri: r for r in resources}
    if by_uri:
        _add_resources(server, by_uri)

    @server.list_tools()
    async def list_tools() -> list[types.Tool]:
        return [types.Tool(name=s["function"]["name"],
                           description=s["function"]["description"],
                           inputSchema=s["function"]["parameters"])
                for s in registry.schemas()]

    @server.call_tool(validate_input=False)
    async def call_tool(name: str, arguments: dict[str, Any] | None) -> types.CallToolResult:
        # an unknown tool is the registry's JSON refusal too (it names the tools there are)
        try:
            result = await anyio.to_thread.run_sync(registry.run, name, dict(arguments or {}))
        except Exception as exc:  # a bug in a tool: still a JSON error, as every refusal is
            log.exception("tool %s failed", name)
            return _result(error_result(f"{name} failed: {exc}"), error=True)
        # a call the client cancelled while the thread ran was answered "cancelled" already:
        # the cancellation is delivered here, so no second answer (the SDK asserted and the
        # server died)
        await anyio.lowlevel.checkpoint()
        return _result(result.text, error=result.is_error)

    return server


def _add_resources(server: Server[Any, Any], by_uri: dict[str, TextResource]) -> None:
    from mcp.server.lowlevel.helper_types import ReadResourceContents
    from pydantic import AnyUrl

    @server.list_resources()
    async def list_resources() -> list[types.Resource]:
        return [types.Resource(uri=AnyUrl(r.uri), name=r.name, description=r.description,
                               mimeType=r.mime_type) for r in by_uri.values()]

    @server.read_resource()
    async def read_resource(uri: AnyUrl) -> list[ReadResourceContents]:
        resource = by_uri.get(str(uri))
        if resource is None:
            raise ValueError(f"unknown resource {uri}")  # the SDK answers with an MCP error
        text = await anyio.to_thread.run_sync(resource.read)
        return [ReadResourceContents(content=text, mime_type=resource.mime_type)]


def _result(text: str, *, error: bool) -> types.CallToolResult:
    # a lone surrogate in a result (a file name that is not UTF-8, a stored row) cannot be
    # written as UTF-8: the SDK's writer failed and the whole server went down with it
    return types.CallToolResult(content=[types.TextContent(type="text",
                                                           text=repair_text(text))],
                                isError=error)


def _repaired_line(line: bytes) -> str:
    """A request line as text: bytes that are not UTF-8 become U+FFFD, and so does a lone
    surrogate escaped in the JSON (``"\\ud800"``, what JavaScript's ``JSON.stringify`` writes
    for one), which the SDK's parser refused: that request was never answered and its client
    waited for ever."""
    text = line.decode("utf-8", errors="replace")
    deep = line.count(b"[") + line.count(b"{") > MAX_DEPTH
    if SURROGATE_IN_JSON.search(line) is None and not deep:
        return text
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return text  # not JSON: the SDK's own error
    # a value nested deeper than the SDK's parser goes (~200 levels) was never answered: it is
    # cut to a marker there, and the request answered
    return json.dumps(_clipped(repair_strings(value), MAX_DEPTH) if deep else
                      repair_strings(value), ensure_ascii=False) + "\n"


MAX_DEPTH = 64  # nesting levels of a request kept; deeper values become NESTED_TOO_DEEP
NESTED_TOO_DEEP = "[nested too deeply: cut by refold mcp]"


def _clipped(value: Any, depth: int) -> Any:
    if not isinstance(value, dict | list):
        return value
    if depth <= 0:
        return NESTED_TOO_DEEP
    if isinstance(value, dict):
        return {k: _clipped(v, depth - 1) for k, v in value.items()}
    return [_clipped(v, depth - 1) for v in value]


def _read_lines(deliver: Callable[[bytes | None], None]) -> None:
    """stdin's lines to ``deliver``, then None at its end (a daemon thread's loop). A closed
    event loop (the server ended) ends it too."""
    try:
        # a reader of its own on fd 0, not sys.stdin's: a read left blocked at exit holds
        # only this one's lock
        with io.BufferedReader(io.FileIO(sys.stdin.fileno(), "rb", closefd=False)) as raw:
            for line in raw:
                deliver(line)
    except (OSError, ValueError):
        pass  # stdin closed or not readable: the end of the input
    except RuntimeError:
        return  # the event loop is closed: nobody reads any more
    with contextlib.suppress(RuntimeError):
        deliver(None)


async def _stdin_lines() -> AsyncIterator[str]:
    """stdin's lines, read on a daemon thread and handed to the event loop.

    The SDK's own reader reads stdin on an anyio worker thread that a cancellation waits
    for: run by hand at a terminal, ``refold mcp`` ignored Ctrl-C (the read went on until a
    line came), and a second Ctrl-C printed "aborted" but the process still waited for that
    line at exit. Here the only thread that blocks on stdin is a daemon thread, and it hands
    each line to the loop (``call_soon_threadsafe``): no worker thread ever waits for input,
    so nothing is left for the interpreter to join at exit and Ctrl-C (SIGINT) ends the
    server at once."""
    loop = asyncio.get_running_loop()
    lines: asyncio.Queue[bytes | None] = asyncio.Queue()

    def deliver(line: bytes | None) -> None:
        loop.call_soon_threadsafe(lines.put_nowait, line)

    threading.Thread(target=_read_lines, args=(deliver,), name="refold-mcp-stdin",
                     daemon=True).start()
    while (line := await lines.get()) is not None:
        yield _repaired_line(line)


async def _serve_stdio(server: Server[Any, Any]) -> None:
    from mcp.server.stdio import stdio_server

    stdin = cast(Any, _stdin_lines())  # the SDK only iterates over it (``async for``)
    async with stdio_server(stdin=stdin) as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def run_stdio(registry: ToolRegistry, resources: Sequence[TextResource] = ()) -> None:
    """Serve ``registry`` over this process's stdin/stdout until the client disconnects."""
    anyio.run(_serve_stdio, build_server(registry, resources))
