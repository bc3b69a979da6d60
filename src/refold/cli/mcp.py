"""``refold mcp``: serve the memory, session_search, skill_manage and expand_references tools
to an MCP client over stdio.

Configure an MCP client with the command ``refold mcp`` (plus ``--home`` or ``REFOLD_HOME`` for
the data directory). stdout belongs to the protocol: nothing else is ever printed there.
Memory writes follow the ``memory_approval`` setting (allow, stage, block).
"""

from __future__ import annotations

import json
from typing import Any

import click

from refold.cli.app import AppContext, pass_app, require_extra

RECENT_SESSIONS = 20


@click.command("mcp")
@click.option("--no-memory", is_flag=True, help="Do not expose the memory tool.")
@pass_app
def mcp_cmd(app: AppContext, no_memory: bool) -> None:
    """Run an MCP server on stdio: memory, session_search, skill_manage, expand_references."""
    require_extra("mcp", "mcp", "mcp")
    from pathlib import Path

    from refold.assembly import memory_store, tenant_skills
    from refold.mcpserver import run_stdio
    from refold.references import local_expander
    from refold.references.spill import SpillStore
    from refold.skills.tool import skill_manage_tool
    from refold.tools import ToolRegistry, memory_tool, session_search_tool
    from refold.tools.expand import expand_tool

    spill = SpillStore(app.settings.home / "spill")  # what @session references spilled
    registry = ToolRegistry([session_search_tool(app.store, owner=None, spill=spill)])
    # local references read the directory the MCP client started the server in (its project)
    expander = local_expander(store=app.store, cwd=Path.cwd(), spill_dir=app.settings.home / "spill",
                              deny_roots=[app.settings.home])
    registry.register(expand_tool(expander, context_length=app.settings.context_length))
    # the memory sessions use: its backend (files or the database), limits, and none at all
    # with memory_enabled = false
    memory = memory_store(app.settings, app.store) \
        if app.settings.memory_enabled and not no_memory else None
    if memory is not None:
        # MCP has no turns: a call chain ends at a successful call or a pause of a minute, and
        # the three-failures stop counts within one chain only
        registry.register(memory_tool(memory, approval=app.settings.memory_approval,
                                      new_turn_after=60.0, reset_on_success=True))
    skills = tenant_skills(app.settings, app.store, "")
    registry.register(skill_manage_tool(skills))
    run_stdio(registry, [*_resources(app, memory), *_skill_resources(skills)])


def _skill_resources(skills: Any) -> list[Any]:
    """Each skill as ``skill://NAME`` (its SKILL.md; the list is the one at start-up)."""
    import functools

    from refold.mcpserver import TextResource
    from refold.skills.tool import SkillResources

    source = SkillResources(skills)
    return [TextResource(uri, name, description, "text/markdown",
                         functools.partial(source.read, uri))
            for uri, name, description in source.resources()]


def _resources(app: AppContext, memory: Any) -> list[Any]:
    from refold.mcpserver import TextResource

    def recent() -> str:
        sessions = app.store.list_sessions(limit=RECENT_SESSIONS)
        return json.dumps([{"id": s.id, "title": s.title, "started_at": s.started_at,
                            "ended_at": s.ended_at, "messages": s.message_count,
                            "parent_session_id": s.parent_session_id,
                            "link_kind": s.link_kind} for s in sessions], ensure_ascii=False)

    found = [TextResource("refold://sessions/recent", "recent sessions",
                          f"The {RECENT_SESSIONS} newest stored sessions (JSON).",
                          "application/json", recent)]
    if memory is not None:
        def snapshot() -> str:
            from refold.memory.snapshot import take_snapshot

            return take_snapshot(memory).text

        found.append(TextResource("refold://memory/snapshot", "memory snapshot",
                                  "MEMORY.md and USER.md as a new session's system prompt "
                                  "gets them.", "text/plain", snapshot))
    return found
