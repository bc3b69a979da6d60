"""`refold mcp` answers a real MCP client (the ``mcp`` package) over stdio."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from refold.store import open_store

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    store = open_store(str(tmp_path / "refold.db"))
    session = store.create_session(title="migration day")
    store.append_messages(session.id, [
        {"role": "user", "content": "Why did the deploy fail?"},
        {"role": "assistant", "content": "The migration 0042_add_invoice_index timed out."},
        {"role": "user", "content": "数据库迁移超时了，怎么办？"},
        {"role": "assistant", "content": "把索引改成 CONCURRENTLY 创建。"},
    ])
    store.close()
    return tmp_path


def _params(home: Path, *extra: str) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable,
                                 args=["-m", "refold.cli.main", "mcp", *extra],
                                 env={"REFOLD_HOME": str(home)})


async def _session(home: Path, calls: list[tuple[str, dict[str, Any]]],
                   *extra: str) -> tuple[list[str], list[Any]]:
    async with Client(_params(home, *extra), read_timeout_seconds=30) as client:
        tools = await client.list_tools()
        results = [await client.call_tool(name, args) for name, args in calls]
    return [t.name for t in tools.tools], results


def _text(result: Any) -> str:
    return "".join(part.text for part in result.content)


def test_no_memory_flag_hides_the_tool(home: Path) -> None:
    names, results = anyio.run(_session, home, [("session_search", {"query": "迁移"}),
                                                ("session_search", {"mode": "bogus"})],
                               "--no-memory")
    assert names == ["session_search"]
    assert "CONCURRENTLY" in _text(results[0]) and not results[0].is_error
    assert results[1].is_error and "mode must be one of" in _text(results[1])
