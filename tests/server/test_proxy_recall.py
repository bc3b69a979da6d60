"""Past-session recall through ``refold serve`` on all three wire APIs (the real SDKs, a scripted
upstream, real sockets): the block reaches the upstream's current user message, never the
system prompt and never the ledger; off unless ``recall_enabled``."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest

from refold.runtime import Engine
from refold.runtime.recall import ARCHIVE_NOTE, RECALL_OPEN
from refold.store import Store
from refold.testing import serve

ProxyFactory = Callable[..., Any]
QUESTION = "What port does the staging database use?"


def seed_past(store: Store) -> set[str]:
    old = store.create_session(title="db work")
    store.append_messages(old.id, [
        {"role": "user", "content": "which port does the staging database listen on?"},
        {"role": "assistant", "content": "The staging database listens on port 6543."}])
    cache = store.create_session(title="cache work")
    store.append_messages(cache.id, [
        {"role": "user", "content": "the redis cache for sessions runs on port 6390"}])
    return {old.id, cache.id}


def stored_text(store: Store, past: set[str]) -> list[str]:
    return [str(r.message.get("content")) for s in store.list_sessions() if s.id not in past
            for r in store.get_messages(s.id)]


def last_user_text(body: dict[str, Any]) -> str:
    users = [m for m in body["messages"] if m["role"] == "user"]
    content = users[-1]["content"]
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)


def test_chat_completions_recall_a_past_session(start_proxy: ProxyFactory, sqlite_store: Store,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    past = seed_past(sqlite_store)
    threads: list[str] = []  # where each recall search ran: never the event loop's thread
    original = Engine.archive_recall

    def recording(self: Engine, user_text: str, session_id: str) -> str:
        threads.append(threading.current_thread().name)
        return original(self, user_text, session_id)

    monkeypatch.setattr(Engine, "archive_recall", recording)
    headers = {"X-Refold-Session": "today"}
    history: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."},
                                     {"role": "user", "content": QUESTION}]
    with serve(["Port 6543.", "Port 6390.", "You're welcome."]) as up:
        proxy = start_proxy(up, recall_enabled=True)
        client = openai.OpenAI(base_url=proxy.base_url, api_key="none", max_retries=0)
        reply = client.chat.completions.create(model="m", messages=history,  # type: ignore[arg-type]
                                               extra_headers=headers)
        # the second turn extends the known chain: in light mode it starts on the event loop
        history += [{"role": "assistant", "content": reply.choices[0].message.content},
                    {"role": "user", "content": "And which port does the redis cache use?"}]
        client.chat.completions.create(model="m", messages=history,  # type: ignore[arg-type]
                                       extra_headers=headers)
        history += [{"role": "assistant", "content": "6390"},
                    {"role": "user", "content": "Thanks, that settles it."}]
        client.chat.completions.create(model="m", messages=history,  # type: ignore[arg-type]
                                       extra_headers=headers)
        first, second, third = up.llm.requests
    assert first["messages"][0] == {"role": "system", "content": "Be brief."}
    assert second["messages"][0] == third["messages"][0] == first["messages"][0]
    sent = last_user_text(first)
    assert sent.startswith(QUESTION) and ARCHIVE_NOTE in sent and "port 6543" in sent
    assert "6390" not in sent
    # the next turn: the earlier question goes as the client sent it; its own recall
    assert second["messages"][1] == {"role": "user", "content": QUESTION}
    assert "port 6390" in last_user_text(second)
    assert second["messages"][:3] == third["messages"][:3]  # nothing before the turn moves
    assert RECALL_OPEN not in last_user_text(third)  # nothing relevant: no block at all
    texts = stored_text(sqlite_store, past)
    assert QUESTION in texts and not any(RECALL_OPEN in t for t in texts)
    assert texts.count(QUESTION) == 1  # stored once, as the client sent it
    assert len(threads) == 3 and all(n.startswith("AnyIO worker") for n in threads), threads


def test_responses_api_recalls_a_past_session(start_proxy: ProxyFactory,
                                              sqlite_store: Store) -> None:
    past = seed_past(sqlite_store)
    with serve(["Port 6543."]) as up:
        proxy = start_proxy(up, recall_enabled=True)
        client = openai.OpenAI(base_url=proxy.base_url, api_key="none", max_retries=0)
        client.responses.create(model="m", instructions="Be brief.", input=QUESTION)
        (body,) = up.llm.requests
    assert body["messages"][0]["role"] == "system"
    assert RECALL_OPEN not in str(body["messages"][0]["content"])
    sent = last_user_text(body)
    assert sent.startswith(QUESTION) and "port 6543" in sent
    assert not any(RECALL_OPEN in t for t in stored_text(sqlite_store, past))


def test_messages_api_recalls_a_past_session(start_proxy: ProxyFactory,
                                             sqlite_store: Store) -> None:
    past = seed_past(sqlite_store)
    with serve(["Port 6543."]) as up:
        proxy = start_proxy(up, recall_enabled=True)
        sdk = anthropic.Anthropic(base_url=proxy.root, api_key="none", max_retries=0,
                                  timeout=30)
        sdk.messages.create(model="claude-scripted", max_tokens=100, system="Be brief.",
                            messages=[{"role": "user", "content": QUESTION}])
        (body,) = up.llm.requests
    assert RECALL_OPEN not in str(body["messages"][0]["content"])
    sent = last_user_text(body)
    assert sent.startswith(QUESTION) and "port 6543" in sent
    assert not any(RECALL_OPEN in t for t in stored_text(sqlite_store, past))


@pytest.mark.parametrize("enabled", [None, False])
def test_recall_is_off_unless_enabled(start_proxy: ProxyFactory, sqlite_store: Store,
                                      enabled: bool | None) -> None:
    seed_past(sqlite_store)
    with serve(["Port 6543."]) as up:
        proxy = start_proxy(up) if enabled is None else start_proxy(up, recall_enabled=False)
        client = openai.OpenAI(base_url=proxy.base_url, api_key="none", max_retries=0)
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": QUESTION}])
        (body,) = up.llm.requests
    assert body["messages"] == [{"role": "user", "content": QUESTION}]


def test_serve_embeds_new_messages_in_the_background(start_proxy: ProxyFactory,
                                                     sqlite_store: Store) -> None:
    """``embed_background = "on"``: the proxy's indexer thread embeds what turns stored (the
    real shipped model), and hybrid becomes the search default once vectors exist."""
    import time

    from refold.search.indexer import missing_count
    from refold.search.vectors import E5Embedder, resolve_mode

    with serve(["Port 6543."]) as up:
        proxy = start_proxy(up, embed_background="on")
        client = openai.OpenAI(base_url=proxy.base_url, api_key="none", max_retries=0)
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": QUESTION}])
        deadline = time.monotonic() + 60  # a hang guard: the loop ends once both are embedded
        while missing_count(sqlite_store, E5Embedder.model):
            assert time.monotonic() < deadline, "the background indexer did not catch up"
            time.sleep(0.02)
        assert resolve_mode(sqlite_store, None) == "hybrid"
