"""``refold mcp``: serve the memory and session_search tools to an MCP client over stdio.

Configure an MCP client with the command ``refold mcp`` (plus ``--home`` or ``REFOLD_HOME`` for
the data directory). stdout belongs to the protocol: nothing else is ever printed there.
Memory writes follow the ``memory_approval`` setting (allow, stage, block).
"""

from __future__ import annotations

import click

from refold.cli.app import AppContext, pass_app


@click.command("mcp")
@click.option("--no-memory", is_flag=True, help="Do not expose the memory tool.")
@pass_app
def mcp_cmd(app: AppContext, no_memory: bool) -> None:
    """Run an MCP server on stdio exposing memory and session_search."""
    from refold.assembly import tenant_skills
    from refold.mcpserver import run_stdio
    from refold.references.spill import SpillStore
    from refold.skills.tool import SkillResources, skill_manage_tool
    from refold.tools import ToolRegistry, memory_tool, session_search_tool

    spill = SpillStore(app.settings.home / "spill")  # what @session references spilled
    registry = ToolRegistry([session_search_tool(app.store, owner=None, spill=spill)])
    if not no_memory:
        # MCP has no turns: a pause of a minute starts a new one for the failure budget
        registry.register(memory_tool(app.settings.memories_dir,
                                      approval=app.settings.memory_approval,
                                      new_turn_after=60.0))
    skills = tenant_skills(app.settings, app.store, "")
    registry.register(skill_manage_tool(skills))
    run_stdio(registry, SkillResources(skills))
