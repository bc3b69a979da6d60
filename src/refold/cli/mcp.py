"""``refold mcp``: serve the memory and session_search tools to an MCP client over stdio.

Configure an MCP client with the command ``refold mcp`` (plus ``--home`` or ``REFOLD_HOME`` for
the data directory). stdout belongs to the protocol: nothing else is ever printed there.
"""

from __future__ import annotations

import click

from refold.cli.app import AppContext, pass_app


@click.command("mcp")
@click.option("--no-memory", is_flag=True, help="Do not expose the memory tool.")
@pass_app
def mcp_cmd(app: AppContext, no_memory: bool) -> None:
    """Run an MCP server on stdio exposing memory and session_search."""
    from refold.mcpserver import run_stdio
    from refold.tools import ToolRegistry, memory_tool, session_search_tool

    registry = ToolRegistry([session_search_tool(app.store, owner=None)])
    memory = None
    if not no_memory:
        memory = _memory(app)
        registry.register(memory_tool(memory))
    try:
        run_stdio(registry)
    finally:
        if memory is not None:
            memory.shutdown()


def _memory(app: AppContext):  # type: ignore[no-untyped-def]
    from refold.memory import MemoryManager, MemoryStore

    return MemoryManager(MemoryStore(app.settings.memories_dir))
