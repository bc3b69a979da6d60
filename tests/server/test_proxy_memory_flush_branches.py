"""Memory flush of a derived family's branches through ``refold serve``: conversations sent with
no ``X-Refold-Session`` that open with the same user message (three Codex runs of one prompt)
share one runtime, which moves between their branches; when that runtime ends (the proxy
stops, or it leaves the cache) every branch it held is reviewed for memory, not only the one
it was in last and the family's first (the middle one of three was never flushed)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
from serve_process import wait_for

from refold.runtime.memory_flush import EVENT
from refold.store import Store
from refold.testing import serve

ProxyFactory = Callable[..., Any]

OPENING = "List the files here and show me notes.txt"
FACTS = ["Remember that the billing service listens on port 7101.",
         "Remember that the search service listens on port 7202.",
         "Remember that the mailer service listens on port 7303."]


def _memory_text(home: Path) -> str:
    return "".join(p.read_text(encoding="utf-8") for p in (home / "memories").glob("*.md"))


def _conversations(client: openai.OpenAI) -> None:
    """Three conversations opening alike, their turns interleaved as runs at once send them:
    each goes on in its own branch of one derived session."""
    histories: list[list[Any]] = [
        [{"role": "system", "content": "You are an agent."},
         {"role": "user", "content": OPENING}] for _ in FACTS]
    for step in range(2):
        for history, fact in zip(histories, FACTS, strict=True):
            reply = client.chat.completions.create(model="m", messages=history)
            history += [{"role": "assistant", "content": reply.choices[0].message.content},
                        {"role": "user", "content": fact if step == 0 else "thanks"}]


def _family(store: Store) -> list[str]:
    sessions = store.list_sessions(limit=10)
    assert len(sessions) == 3, [s.title for s in sessions]  # the first and its two branches
    assert sum(s.link_kind == "branch" for s in sessions) == 2
    return [s.id for s in sessions]


def _reasons(store: Store, session_id: str) -> list[str]:
    return [e.payload["reason"] for e in store.list_events(session_id, EVENT)]


def test_every_branch_is_flushed_when_the_proxy_stops(
        start_proxy: ProxyFactory, sqlite_store: Store, tmp_path: Path) -> None:
    home, store = tmp_path / "home", sqlite_store
    with serve(default=lambda _b: "ok") as up:
        proxy = start_proxy(up)
        _conversations(openai.OpenAI(base_url=proxy.base_url, api_key="none", max_retries=0))
        ids = _family(store)
        assert all(_reasons(store, sid) == [] for sid in ids)  # nothing ended yet
        proxy.server.should_exit = True  # shutdown closes the cached runtime and the engine
        wait_for(lambda: all(_reasons(store, sid) for sid in ids), "every branch flushed",
                 10)
    assert {sid: _reasons(store, sid) for sid in ids} == {sid: ["session_end"] for sid in ids}
    saved = _memory_text(home)
    assert all(f"port {port}" in saved for port in (7101, 7202, 7303)), saved


def test_every_branch_is_flushed_when_their_runtime_leaves_the_cache(
        start_proxy: ProxyFactory, sqlite_store: Store, tmp_path: Path) -> None:
    home, store = tmp_path / "home", sqlite_store
    with serve(default=lambda _b: "ok") as up:
        proxy = start_proxy(up, capacity=1)
        client = openai.OpenAI(base_url=proxy.base_url, api_key="none", max_retries=0)
        _conversations(client)
        ids = _family(store)
        client.chat.completions.create(  # capacity 1: the family's runtime leaves the cache
            model="m", messages=[{"role": "user", "content": "hello"}],
            extra_headers={"X-Refold-Session": "other"})
        wait_for(lambda: all(_reasons(store, sid) for sid in ids), "every branch flushed",
                 10)  # the proxy still runs
        assert {sid: _reasons(store, sid) for sid in ids} == \
            {sid: ["session_end"] for sid in ids}
        saved = _memory_text(home)
        assert all(f"port {port}" in saved for port in (7101, 7202, 7303)), saved
