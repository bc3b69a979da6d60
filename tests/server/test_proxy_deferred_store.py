"""The proxy's deferred store (light mode): a turn on the known fast path is sent upstream first
and its new messages are stored while the model works — but always before any of the reply
reaches the client, and never as a request that differs from what the ledger gives.

Both ways the proxy runs (conftest's ``sqlite_store``: NORMAL = light mode, FULL = threads,
which never defers) must give the same ledger. Real sockets, real SQLite; another process is
played by a second ``SQLiteStore`` on the same file; a storage failure is a real SQLite trigger.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

import openai
import pytest

from refold.store.sqlite import SQLiteStore
from refold.testing import ScriptedReply, serve

ProxyFactory = Callable[..., Any]
SYSTEM = {"role": "system", "content": "You are terse."}
HEADERS = {"X-Refold-Session": "deferred"}


def sdk(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="none", max_retries=0, timeout=30)


def active(store: SQLiteStore, session_id: str) -> list[tuple[str, str]]:
    return [(r.role, str(r.message.get("content") or ""))
            for r in store.get_messages(session_id)]


def two_turns(client: openai.OpenAI) -> list[dict[str, Any]]:
    """Two JSON turns of one session (the chain known, the fast path open); the history to
    send next, ending with the user message "q2"."""
    history: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "q0"}]
    for turn in range(2):
        reply = client.chat.completions.create(model="m", messages=history,
                                               extra_headers=HEADERS)
        history += [{"role": "assistant", "content": reply.choices[0].message.content},
                    {"role": "user", "content": f"q{turn + 1}"}]
    return history


def light(store: SQLiteStore) -> bool:
    return store.db.synchronous == "NORMAL"


def test_the_turns_messages_are_stored_before_the_first_reply_byte(
        start_proxy: ProxyFactory, sqlite_store: SQLiteStore) -> None:
    """Whatever overlapped, when the client reads its first streamed chunk the turn's messages
    are stored (a second handle on the file sees them), each once."""
    other = SQLiteStore(sqlite_store.db.path)
    try:
        # the chunks come 50 ms apart: the reply is recorded well after the first one
        with serve(default=lambda body: ScriptedReply(content="ok then",
                                                      chunk_delay=0.05)) as up:
            proxy = start_proxy(up)
            client = sdk(proxy.base_url)
            history: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "q0"}]
            seen_at_first_byte: list[list[tuple[str, str]]] = []
            for turn in range(6):
                stream = client.chat.completions.create(
                    model="m", messages=history, stream=True, extra_headers=HEADERS)
                text = ""
                for chunk in stream:
                    if not text and chunk.choices and chunk.choices[0].delta.content:
                        session = other.list_sessions()[0]
                        seen_at_first_byte.append(active(other, session.id))
                    if chunk.choices:
                        text += chunk.choices[0].delta.content or ""
                history += [{"role": "assistant", "content": text},
                            {"role": "user", "content": f"q{turn + 1}"}]
            counts = proxy.app.state.proxy_app.proxy
            if light(sqlite_store):
                assert counts.light_prepares >= 4  # the fast path ran, so did the deferral
                assert counts.deferred_stores + counts.deferred_to_worker >= 4
            else:
                assert counts.deferred_stores == counts.deferred_to_worker == 0
            assert counts.voided_requests == 0
        for turn, seen in enumerate(seen_at_first_byte):
            expected = [("user", "q0")]
            for earlier in range(turn):
                expected += [("assistant", "ok then"), ("user", f"q{earlier + 1}")]
            assert seen == expected
    finally:
        other.close()


def test_another_writer_between_turns_is_seen_before_the_request_goes_up(
        start_proxy: ProxyFactory, sqlite_store: SQLiteStore) -> None:
    """Another process appends to the session between two turns (as another worker serving
    the previous turn does). The deferred store is not used: the session's tip moved, so the
    request would be void; the turn is prepared from the ledger and sent upstream once (never
    a second paid call for one turn). The client sees one reply; the ledger holds its history
    once (the stray message rewound, as a client re-sending a different history always does)."""
    other = SQLiteStore(sqlite_store.db.path)
    try:
        with serve(default=lambda body: ScriptedReply(content="fine")) as up:
            proxy = start_proxy(up)
            client = sdk(proxy.base_url)
            history = two_turns(client)
            session = other.list_sessions()[0]
            other.append_messages(session.id, [{"role": "user", "content": "from elsewhere"}])
            before = len(up.llm.requests)
            stream = client.chat.completions.create(model="m", messages=history, stream=True,
                                                    extra_headers=HEADERS)
            text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
            sent = up.llm.requests[before:]
            voided = proxy.app.state.proxy_app.proxy.voided_requests
            assert f"requests voided by another writer {voided}" in \
                proxy.app.state.proxy_app.proxy.summary()
        assert text == "fine"
        assert voided == 0
        assert len(sent) == 1
        final = [(m["role"], m["content"]) for m in sent[-1]["messages"]]
        assert final == [(m["role"], m["content"]) for m in history]
        assert active(other, session.id) == [(m["role"], m["content"])
                                             for m in history[1:]] + [("assistant", "fine")]
    finally:
        other.close()


def test_a_store_failure_after_the_request_went_up_is_an_error_and_stores_nothing(
        start_proxy: ProxyFactory, sqlite_store: SQLiteStore) -> None:
    """The deferred store fails (a real SQLite error): the client gets an OpenAI-shaped error
    status instead of a stream, nothing of the turn is stored, and the next turn works."""
    conn = sqlite3.connect(sqlite_store.db.path)
    conn.execute("CREATE TRIGGER poison BEFORE INSERT ON messages WHEN new.text LIKE '%POISON%' "
                 "BEGIN SELECT RAISE(ABORT, 'the disk says no'); END")
    conn.commit()
    conn.close()
    with serve(default=lambda body: ScriptedReply(content="sure")) as up:
        proxy = start_proxy(up)
        client = sdk(proxy.base_url)
        history = two_turns(client)
        session = sqlite_store.list_sessions()[0]
        stored = active(sqlite_store, session.id)
        with pytest.raises(openai.APIStatusError) as caught:
            stream = client.chat.completions.create(
                model="m", messages=[*history[:-1], {"role": "user", "content": "POISON"}],
                stream=True, extra_headers=HEADERS)
            list(stream)
        assert caught.value.status_code >= 500
        assert "the disk says no" in str(caught.value)
        assert active(sqlite_store, session.id) == stored  # nothing of that turn
        reply = client.chat.completions.create(model="m", messages=history,
                                               extra_headers=HEADERS)
        assert reply.choices[0].message.content == "sure"
    assert active(sqlite_store, session.id) == [*stored, ("user", "q2"), ("assistant", "sure")]


def test_an_upstream_error_on_a_deferred_turn_still_stores_its_messages_once(
        start_proxy: ProxyFactory, sqlite_store: SQLiteStore) -> None:
    """The upstream fails the third turn (a 500, then a dropped connection): the client gets
    the error, the turn's message is stored as it was before deferral existed, and the client's
    retry of the same history stores nothing twice."""
    failures = [ScriptedReply(status=500, error={"error": {"message": "scripted 500"}}),
                ScriptedReply(drop_connection=True)]
    with serve(["one", "two", *failures, "three"]) as up:
        proxy = start_proxy(up)
        client = sdk(proxy.base_url)
        history = two_turns(client)
        session = sqlite_store.list_sessions()[0]
        for stream in (True, False):
            with pytest.raises(openai.APIStatusError) as caught:
                if stream:
                    list(client.chat.completions.create(model="m", messages=history,
                                                        stream=True, extra_headers=HEADERS))
                else:
                    client.chat.completions.create(model="m", messages=history,
                                                   extra_headers=HEADERS)
            assert caught.value.status_code == 502
            assert active(sqlite_store, session.id)[-1] == ("user", "q2")  # stored
        reply = client.chat.completions.create(model="m", messages=history,
                                               extra_headers=HEADERS)
        assert reply.choices[0].message.content == "three"
        if light(sqlite_store):
            assert proxy.app.state.proxy_app.proxy.deferred_stores >= 1
    assert active(sqlite_store, session.id) == [
        ("user", "q0"), ("assistant", "one"), ("user", "q1"), ("assistant", "two"),
        ("user", "q2"), ("assistant", "three")]

