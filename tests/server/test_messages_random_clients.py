"""Random Anthropic-SDK clients through ``/v1/messages`` with compaction on (Claude Code's way
in, a chat-completions upstream): ``test_proxy_random_clients.py``'s checks on what the
upstream received (the client's window in the chat form, but for summaries and pruned outputs)
and on the ledger, with tool_use / tool_result turns, regenerates, sliding windows and
upstream 500s."""

from __future__ import annotations

import random
from typing import Any

import anthropic
import pytest
from test_proxy_random_clients import Upstream, check, key, text

from refold.messages.anthropic import from_anthropic
from refold.store import Store
from refold.testing import serve


@pytest.mark.parametrize(("seed", "rotate"), [(0, False), (3, True)], ids=["plain", "rotate"])
def test_random_anthropic_clients_see_their_own_requests(
        start_proxy: Any, sqlite_store: Store, seed: int, rotate: bool) -> None:
    rng = random.Random(seed)
    upstream = Upstream(rng, "toolu")
    with serve(default=upstream.reply) as up:
        proxy = start_proxy(up, context_length=8000, rotate_on_compaction=rotate)
        sdk = anthropic.Anthropic(base_url=proxy.root, api_key="x", max_retries=0, timeout=30)
        clients: list[dict[str, Any]] = [{"conv": [{"role": "user", "content": text(f"client {c} opens", c, 100)}],
                    "start": 0, "last": None} for c in range(3)]
        seen = 0
        for turn in range(60):
            client = rng.choice(clients)
            action = rng.choice(["extend"] * 6 + ["regenerate", "slide"])
            last, conv = client["last"], client["conv"]
            if action != "regenerate" and last is not None:
                conv.append(last)
                uses = [b for b in last["content"] if b["type"] == "tool_use"]
                conv.append({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": uses[0]["id"],
                     "content": text("output", turn, rng.choice((10, 200)))}]} if uses else
                    {"role": "user", "content": text("asks", turn, rng.choice((10, 100)))})
                client["last"] = None
            if action == "slide":
                users = [i for i in range(client["start"] + 1, len(conv) - 2)
                         if conv[i]["role"] == "user" and isinstance(conv[i]["content"], str)]
                if users:
                    client["start"] = rng.choice(users)
            window = conv[client["start"]:]
            before = len(up.llm.requests)
            try:
                if rng.random() < 0.5:
                    with sdk.messages.stream(model="m", max_tokens=100, system="Be terse.",
                                             messages=window) as stream:
                        message = stream.get_final_message()
                else:
                    message = sdk.messages.create(model="m", max_tokens=100, system="Be terse.",
                                                  messages=window)
                client["last"] = {"role": "assistant", "content": [
                    b.model_dump(exclude_none=True) for b in message.content]}
            except anthropic.InternalServerError:
                seen += 1
            assert len(up.llm.requests) == before + 1
            check(up.llm.requests[-1]["messages"], from_anthropic(window, system="Be terse."))
    assert seen == upstream.errors
    stored: set[tuple[Any, ...]] = set()
    for session in sqlite_store.list_sessions(limit=1000):
        rows = [key(r.message) for r in sqlite_store.get_messages(session.id)]
        assert len(rows) == len(set(rows)), session.title  # nothing stored twice
        stored.update(rows)
    for client in clients:  # everything sent is stored
        assert {key(m) for m in from_anthropic(client["conv"])} <= stored
