"""`refold mcp` serves skill_manage and the skills as resources to a real MCP client."""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from refold.skills import open_skills

pytestmark = pytest.mark.timeout(60)


async def _run(home: Path) -> dict[str, Any]:
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "refold.cli.main", "mcp"],
                                   env={**os.environ, "REFOLD_HOME": str(home)})
    async with stdio_client(params) as (read, write), \
            ClientSession(read, write, read_timeout_seconds=timedelta(seconds=30)) as client:
        await client.initialize()
        tools = [t.name for t in (await client.list_tools()).tools]
        created = await client.call_tool("skill_manage", {
            "action": "create", "name": "triage", "description": "Sort incoming bugs.",
            "body": "# Triage\n- label it\n"})
        listed = await client.list_resources()
        read = await client.read_resource("skill://ship-it")  # type: ignore[arg-type]
        bad = await client.call_tool("skill_manage", {"action": "view", "name": "../x"})
    return {"tools": tools, "created": created, "resources": listed.resources, "read": read,
            "bad": bad}


def test_skills_over_mcp(tmp_path: Path) -> None:
    open_skills(tmp_path / "skills").create("ship-it", "How to release.", "1. test\n2. tag\n")
    out = anyio.run(_run, tmp_path)
    assert "skill_manage" in out["tools"] and "session_search" in out["tools"]
    assert json.loads(out["created"].content[0].text)["changed"] is True
    skills = [(str(r.uri), r.description) for r in out["resources"]
              if str(r.uri).startswith("skill://")]
    assert skills == [("skill://ship-it", "How to release.")]  # the skills at start-up
    assert out["read"].contents[0].text.startswith("---\nname: ship-it\n")
    assert out["bad"].isError and "bad skill name" in out["bad"].content[0].text
    assert (tmp_path / "skills" / "triage" / "SKILL.md").is_file()
