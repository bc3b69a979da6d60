"""The proxy in light mode: over a SQLite store with synchronous NORMAL the runtime's small store
work runs on the event loop; a body over 1 MiB, a heavy new message or reply (over 64 K
characters: its append) and a FULL store go to worker threads. Either way every message is stored once and the
reply is recorded.

Real sockets: the OpenAI SDK → uvicorn (refold's app) → the scripted upstream. The store is
real; ``ThreadNotingStore`` only notes which thread each ledger write ran on and forwards all.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from refold.errors import WouldBlock
from refold.store import Store
from refold.store.sqlite import SQLiteStore
from refold.testing import serve

ProxyFactory = Callable[..., Any]
SYSTEM = {"role": "system", "content": "You are terse."}
WORKER = "AnyIO worker thread"  # anyio's name for its to_thread workers


class ThreadNotingStore:
    """The real store, noting the thread of every ledger write."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.writes: list[tuple[str, str]] = []

    def append_messages(self, *args: Any, **kwargs: Any) -> Any:
        self.writes.append(("append", threading.current_thread().name))
        return self._store.append_messages(*args, **kwargs)

    def sync_messages(self, *args: Any, **kwargs: Any) -> Any:
        self.writes.append(("sync", threading.current_thread().name))
        return self._store.sync_messages(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


@pytest.fixture
def sqlite_store(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    """Overrides conftest's (FULL) store: NORMAL unless a test asks otherwise (indirect)."""
    synchronous = getattr(request, "param", "NORMAL")
    store = SQLiteStore(str(tmp_path / "proxy.db"),
                        synchronous="NORMAL" if synchronous == "busy" else synchronous)
    yield BusyStore(store) if synchronous == "busy" else ThreadNotingStore(store)
    store.close()


def sdk(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="none", max_retries=0, timeout=30)


def rows(store: Store) -> list[tuple[str, str]]:
    sessions = store.list_sessions()
    assert len(sessions) == 1
    return [(r.role, str(r.message.get("content") or ""))
            for r in store.get_messages(sessions[0].id)]


def streamed(client: openai.OpenAI, history: list[dict[str, Any]]) -> str:
    stream = client.chat.completions.create(model="scripted-model", messages=history,
                                            stream=True)
    return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)


def test_streamed_turns_in_light_mode_store_each_message_once(
        start_proxy: ProxyFactory, sqlite_store: ThreadNotingStore) -> None:
    replies = [f"reply {i}" for i in range(5)]
    with serve(replies) as up:
        proxy = start_proxy(up)
        assert proxy.app.state.proxy_app.proxy.light is True
        client = sdk(proxy.base_url)
        history: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "q0"}]
        expected: list[tuple[str, str]] = [("user", "q0")]
        for i in range(5):
            text = streamed(client, history)
            assert text == replies[i]
            expected.append(("assistant", text))
            history += [{"role": "assistant", "content": text},
                        {"role": "user", "content": f"q{i + 1}"}]
            expected.append(("user", f"q{i + 1}"))
    assert rows(sqlite_store) == expected[:-1]  # the last user message was never sent
    session = sqlite_store.list_sessions()[0]
    assert session.input_tokens > 0 and session.output_tokens > 0
    # the first turn synced in a worker; later turns appended on the event loop
    assert sqlite_store.writes[0] == ("sync", WORKER)
    loop_writes = [w for w in sqlite_store.writes[1:] if w[1] != WORKER]
    assert len(loop_writes) >= 8, sqlite_store.writes


def test_a_heavy_new_message_is_stored_from_a_worker_and_stored_once(
        start_proxy: ProxyFactory, sqlite_store: ThreadNotingStore) -> None:
    from refold.runtime.inline import INLINE_NEW_CHARS

    big = "x" * (INLINE_NEW_CHARS + 1024)
    with serve(["one", "two", "three"]) as up:
        proxy = start_proxy(up)
        client = sdk(proxy.base_url)
        history: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "q0"}]
        assert streamed(client, history) == "one"
        history += [{"role": "assistant", "content": "one"}, {"role": "user", "content": big}]
        sqlite_store.writes.clear()
        assert streamed(client, history) == "two"
        # the heavy message appended from a worker thread; the small reply recorded on the
        # event loop (the body, ~70 KB, is within light mode's 1 MiB)
        assert [w[0] for w in sqlite_store.writes] == ["append", "append"], sqlite_store.writes
        assert sqlite_store.writes[0][1] == WORKER and sqlite_store.writes[1][1] != WORKER, \
            sqlite_store.writes
        history += [{"role": "assistant", "content": "two"}, {"role": "user", "content": "q2"}]
        reply = client.chat.completions.create(model="scripted-model",
                                               messages=history)
        assert reply.choices[0].message.content == "three"
    assert rows(sqlite_store) == [("user", "q0"), ("assistant", "one"), ("user", big),
                                  ("assistant", "two"), ("user", "q2"), ("assistant", "three")]


def test_a_long_reply_is_recorded_from_a_worker_and_stored_once(
        start_proxy: ProxyFactory, sqlite_store: ThreadNotingStore) -> None:
    from refold.runtime.inline import INLINE_NEW_CHARS

    long = "z" * (INLINE_NEW_CHARS + 1024)
    with serve(["one", long, "three"]) as up:
        proxy = start_proxy(up)
        client = sdk(proxy.base_url)
        history: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "q0"}]
        assert streamed(client, history) == "one"
        history += [{"role": "assistant", "content": "one"}, {"role": "user", "content": "q1"}]
        sqlite_store.writes.clear()
        assert streamed(client, history) == long
        # the small question appended on the event loop, the long reply from a worker
        assert [w[0] for w in sqlite_store.writes] == ["append", "append"], sqlite_store.writes
        assert sqlite_store.writes[0][1] != WORKER and sqlite_store.writes[1][1] == WORKER, \
            sqlite_store.writes
        history += [{"role": "assistant", "content": long}, {"role": "user", "content": "q2"}]
        assert streamed(client, history) == "three"
    assert rows(sqlite_store) == [("user", "q0"), ("assistant", "one"), ("user", "q1"),
                                  ("assistant", long), ("user", "q2"), ("assistant", "three")]


def test_a_body_over_a_mib_goes_to_a_worker_and_is_stored_once(
        start_proxy: ProxyFactory, sqlite_store: ThreadNotingStore) -> None:
    from refold.server.completions import INLINE_JSON_BYTES

    huge = "y" * INLINE_JSON_BYTES  # sent once; re-sent with every later turn
    with serve(["one", "two"]) as up:
        proxy = start_proxy(up, context_length=4_000_000)  # (no compaction here)
        client = sdk(proxy.base_url)
        history: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": huge}]
        assert streamed(client, history) == "one"
        history += [{"role": "assistant", "content": "one"}, {"role": "user", "content": "q1"}]
        sqlite_store.writes.clear()
        assert streamed(client, history) == "two"
        # over INLINE_JSON_BYTES: parsed, appended and recorded in worker threads
        assert sqlite_store.writes and all(w[1] == WORKER for w in sqlite_store.writes), \
            sqlite_store.writes
    assert rows(sqlite_store) == [("user", huge), ("assistant", "one"), ("user", "q1"),
                                  ("assistant", "two")]


@pytest.mark.parametrize("sqlite_store", ["FULL"], indirect=True)
def test_a_full_store_never_runs_light(start_proxy: ProxyFactory,
                                       sqlite_store: ThreadNotingStore) -> None:
    with serve(["a", "b"]) as up:
        proxy = start_proxy(up)
        assert proxy.app.state.proxy_app.proxy.light is False
        client = sdk(proxy.base_url)
        history: list[dict[str, Any]] = [{"role": "user", "content": "q0"}]
        assert streamed(client, history) == "a"
        history += [{"role": "assistant", "content": "a"}, {"role": "user", "content": "q1"}]
        assert streamed(client, history) == "b"
    assert len(sqlite_store.writes) == 4
    assert all(w[1] == WORKER for w in sqlite_store.writes), sqlite_store.writes
    assert rows(sqlite_store) == [("user", "q0"), ("assistant", "a"), ("user", "q1"),
                                  ("assistant", "b")]


class BusyStore(ThreadNotingStore):
    """The real store; the next ``busy`` appends from the event loop find it busy (another
    thread's write, as ``WouldBlock`` says: nothing done) and are refused."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.busy = 0
        self.refused = 0

    def append_messages(self, *args: Any, **kwargs: Any) -> Any:
        if self.busy and threading.current_thread().name != WORKER:
            self.busy -= 1
            self.refused += 1
            raise WouldBlock("the database is in use by another thread")
        return super().append_messages(*args, **kwargs)


@pytest.mark.parametrize("sqlite_store", ["busy"], indirect=True)
def test_a_store_busy_for_a_moment_is_tried_again_on_the_event_loop(
        start_proxy: ProxyFactory, sqlite_store: BusyStore) -> None:
    """The deferred store and the reply's record each find the store busy once: both are
    tried again on the event loop a moment later instead of going to worker threads (a worker
    holding the store while it waited for the GIL made more of the loop's writes fail, and
    each failure sent one more turn to a worker)."""
    with serve(["one", "two"]) as up:
        proxy = start_proxy(up)
        client = sdk(proxy.base_url)
        history: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "q0"}]
        assert streamed(client, history) == "one"
        history += [{"role": "assistant", "content": "one"}, {"role": "user", "content": "q1"}]
        sqlite_store.writes.clear()
        sqlite_store.busy = 2  # the deferred store's first try, then the record's
        assert streamed(client, history) == "two"
        counts = proxy.app.state.proxy_app.proxy
    assert sqlite_store.refused == 2
    assert [w[0] for w in sqlite_store.writes] == ["append", "append"], sqlite_store.writes
    assert all(w[1] != WORKER for w in sqlite_store.writes), sqlite_store.writes
    assert (counts.deferred_to_worker, counts.worker_records) == (0, 0)
    assert rows(sqlite_store) == [("user", "q0"), ("assistant", "one"), ("user", "q1"),
                                  ("assistant", "two")]
