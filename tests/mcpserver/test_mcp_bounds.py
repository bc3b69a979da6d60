"""What `refold mcp` answers at the edges: every error is JSON, every result within its bound.

In process: the server from ``build_server`` and a client joined by memory streams."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
from mcp import ClientSession
from mcp.shared.memory import create_connected_server_and_client_session

from refold.mcpserver import build_server
from refold.search.query import MAX_QUERY_CHARS
from refold.store import Store, open_store
from refold.tools import ToolRegistry, session_search, session_search_tool
from refold.tools.registry import Tool, to_json
from refold.tools.session_search import MAX_RESULT_CHARS

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return open_store(str(tmp_path / "refold.db"))


def _call(registry: ToolRegistry,
          use: Callable[[ClientSession], Awaitable[list[Any]]]) -> list[Any]:
    async def run() -> list[Any]:
        async with create_connected_server_and_client_session(
                build_server(registry), read_timeout_seconds=timedelta(seconds=30)) as client:
            return await use(client)
    return anyio.run(run)


def _text(result: Any) -> str:
    return "".join(part.text for part in result.content)


def test_an_unknown_tool_and_a_failing_tool_answer_json_errors(store: Store) -> None:
    def boom(args: dict[str, Any]) -> str:
        raise OverflowError("Python int too large to convert to SQLite INTEGER")

    registry = ToolRegistry([session_search_tool(store, owner=None),
                             Tool("boom", "Fails.", {"type": "object"}, boom)])

    async def use(client: ClientSession) -> list[Any]:
        return [await client.call_tool("nonexistent_tool", {}),
                await client.call_tool("boom", {})]

    unknown, failed = _call(registry, use)
    assert unknown.isError and failed.isError
    error = json.loads(_text(unknown))["error"]
    assert "unknown tool 'nonexistent_tool'" in error and "session_search" in error, error
    assert json.loads(_text(failed)) == {
        "error": "boom failed: Python int too large to convert to SQLite INTEGER"}


def _long_session(store: Store, count: int, title: str = "long one") -> str:
    session = store.create_session(title=title)
    store.append_messages(session.id, [
        {"role": "user" if i % 2 == 0 else "assistant",
         "content": f"message {i} " + "lorem ipsum dolor " * 100} for i in range(count)])
    return session.id


def _search(registry: ToolRegistry, *calls: dict[str, Any]) -> list[tuple[bool, str]]:
    async def use(client: ClientSession) -> list[Any]:
        return [await client.call_tool("session_search", args) for args in calls]
    return [(r.isError, _text(r)) for r in _call(registry, use)]


def _read_all(registry: ToolRegistry, session: str, limit: int) -> list[dict[str, Any]]:
    """Every page of mode=read, following next_start_seq from the start (at most 100 pages)."""
    async def use(client: ClientSession) -> list[Any]:
        pages: list[Any] = []
        args: dict[str, Any] = {"mode": "read", "session_id": session, "limit": limit}
        while len(pages) < 100:
            page = json.loads(_text(await client.call_tool("session_search", args)))
            pages.append(page)
            if "next_start_seq" not in page:
                break
            args["start_seq"] = page["next_start_seq"]
        return pages
    return _call(registry, use)


def test_paging_a_long_session_by_next_start_seq_reads_every_message_once(store: Store) -> None:
    """200 long messages, 50 a page: a page holds ~18 of them within the 16,000 characters, and
    the next one starts after the last it shows (it used to skip to 51, losing 128 of 200)."""
    session = _long_session(store, 200)
    pages = _read_all(ToolRegistry([session_search_tool(store, owner=None)]), session, 50)
    seqs = [m["seq"] for page in pages for m in page["messages"]]
    assert seqs == list(range(1, 201))
    assert all(len(json.dumps(p, ensure_ascii=False, separators=(",", ":"))) <= MAX_RESULT_CHARS
               for p in pages)
    cut = [p for p in pages if p.get("truncated")]
    assert len(cut) >= 10 and all("next_start_seq" in p for p in cut)  # the last range too
    assert "next_start_seq" not in pages[-1] and not pages[-1].get("truncated")


def test_a_message_too_long_for_the_bound_alone_is_clipped_and_paging_moves_on(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(session_search, "MAX_RESULT_CHARS", 600)  # < one 800-char message
    session = _long_session(store, 5)
    pages = _read_all(ToolRegistry([session_search_tool(store, owner=None)]), session, 5)
    assert [[m["seq"] for m in p["messages"]] for p in pages] == [[1], [2], [3], [4], [5]]
    assert all(p["messages"][0]["text"].endswith(session_search.CLIPPED) for p in pages)
    assert all(len(to_json(p)) <= 600 for p in pages)


def test_a_huge_query_is_echoed_clipped_and_the_result_stays_valid_json(store: Store) -> None:
    session = store.create_session(title="deploys")
    store.append_messages(session.id, [{"role": "user", "content": "Why did the deploy fail?"},
                                       {"role": "assistant", "content": "The deploy timed out."}])
    queries = ["deploy " * 20000, " ".join(f"word{i}" for i in range(5000)) + " deploy",
               "部署失败了吗" * 3000]
    results = _search(ToolRegistry([session_search_tool(store, owner=None)]),
                      *({"query": q} for q in queries))
    for query, (error, text) in zip(queries, results, strict=True):
        assert not error and len(text) <= MAX_RESULT_CHARS, len(text)
        body = json.loads(text)  # it used to be 32,000 characters cut inside the query
        assert body["query"] == query.strip()[:MAX_QUERY_CHARS] and body["query_clipped"] is True
    assert json.loads(results[0][1])["hits"] == 2  # the search itself read the first words


def test_around_keeps_the_message_asked_for_and_refuses_a_seq_out_of_range(
        store: Store) -> None:
    _long_session(store, 60)
    results = _search(ToolRegistry([session_search_tool(store, owner=None)]),
                      {"mode": "around", "session_id": "long one", "seq": 30, "window": 20},
                      {"mode": "around", "session_id": "long one", "seq": 10**20},
                      {"mode": "around", "session_id": "long one", "seq": -1})
    error, text = results[0]
    body = json.loads(text)
    seqs = [m["seq"] for m in body["messages"]]
    assert not error and len(text) <= MAX_RESULT_CHARS and body["truncated"] is True
    assert [m["seq"] for m in body["messages"] if m.get("hit")] == [30]  # it was cut: 10..27
    assert seqs == list(range(seqs[0], seqs[-1] + 1)) and abs((30 - seqs[0]) - (seqs[-1] - 30)) <= 1
    for error, text in results[1:]:  # 10**20 was SQLite's plain-text OverflowError
        assert error and json.loads(text) == {
            "error": "'seq' is out of range (messages are numbered from 1)"}


class _NoEmbedder:
    model = "none"
    dim = 4

    def passages(self, texts: list[str]) -> Any:
        raise AssertionError("nothing is embedded here")

    def query(self, text: str) -> Any:
        raise AssertionError("an archive without vectors needs no query vector")


@pytest.fixture
def migration(store: Store) -> ToolRegistry:
    store.append_messages(store.create_session(title="migration day").id, [
        {"role": "user", "content": "Why did the migration time out?"}])
    return ToolRegistry([session_search_tool(store, owner=None)])


def test_a_bad_search_mode_is_named_search_mode(migration: ToolRegistry) -> None:
    [(error, text)] = _search(migration, {"query": "migration", "search_mode": "nope"})
    assert error and json.loads(text) == {  # it said "mode must be one of …"
        "error": "search_mode must be one of fts, vector, hybrid"}


def test_an_unknown_role_is_refused(migration: ToolRegistry) -> None:
    bad, good = _search(migration, {"query": "migration", "role": "nobody"},
                        {"query": "migration", "role": "user"})
    assert bad[0] and json.loads(bad[1]) == {  # it was accepted, and found nothing
        "error": "role must be one of user, assistant, tool, system, developer"}
    assert not good[0] and json.loads(good[1])["hits"] == 1


def test_a_vector_search_of_an_archive_without_vectors_says_so(
        store: Store, migration: ToolRegistry) -> None:
    from refold.search import vectors

    vectors._INDEXES[store] = vectors.VectorIndex(store, _NoEmbedder())  # no model loaded
    vector, fts = _search(migration, {"query": "migration", "search_mode": "vector"},
                          {"query": "migration", "search_mode": "fts"})
    body = json.loads(vector[1])
    assert not vector[0] and body["hits"] == 0 and "refold index" in body["note"], body
    assert json.loads(fts[1])["hits"] == 1 and "note" not in json.loads(fts[1])


def test_an_infinite_integer_argument_is_refused_not_raised(store: Store) -> None:
    """JSON's 1e400 decodes to inf (int(inf) raised OverflowError); the client would send null
    for it, so the request goes straight to the server's handler."""
    server = build_server(ToolRegistry([session_search_tool(store, owner=None)]))
    request = types.CallToolRequest(params=types.CallToolRequestParams(
        name="session_search", arguments={"query": "x", "limit": float("inf")}))
    result = anyio.run(server.request_handlers[types.CallToolRequest], request).root
    assert isinstance(result, types.CallToolResult) and result.isError and json.loads(_text(result)) == {"error": "'limit' must be an integer"}
