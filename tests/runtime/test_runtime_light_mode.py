"""Light mode (``rt.inline.prepare`` / ``rt.inline.record``): the proxy's small,
bounded store work on its event loop. Where a turn needs more (first turn, a compaction may
start, something is busy, the store cannot promise quick commits) the light call returns
None/False having stored nothing, and the same call without ``light`` does the turn — exactly
as a runtime that never used light mode would (checked against a twin on another store).

The stores are real SQLite files (synchronous NORMAL/FULL), ``:memory:`` and PostgreSQL.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from refold.runtime import Engine
from refold.runtime.prepared import Prepared
from refold.runtime.session import SessionRuntime
from refold.store import Store
from refold.store.sqlite import SQLiteStore

from ._helpers import WINDOW, answer, tool_turn

SYSTEM = "You are a careful assistant."
WIDE = 200_000  # no compaction in these turns
HANG_GUARD = 5.0  # seconds: only to stop a hanging call from hanging the suite


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def bot(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def make_engine(store: Store, window: int = WIDE, background: bool = False) -> Engine:
    return Engine(store, model="gpt-4o-mini", context_length=window,
                  background_precompact=background)


@pytest.fixture
def engines(normal_store: SQLiteStore, twin_store: Store) -> Iterator[list[Engine]]:
    made: list[Engine] = []
    yield made
    for engine in made:
        engine.close()


def contents(store: Store, session_id: str) -> list[tuple[str, Any]]:
    return [(m.message["role"], m.message.get("content"))
            for m in store.get_messages(session_id)]


def message_count(store: Store, session_id: str) -> int:
    return store.get_session(session_id).message_count


def prepare(rt: SessionRuntime, history: list[dict[str, Any]],
            light_log: list[bool]) -> Prepared:
    """The proxy's order: light first, the worker call when it says None."""
    prepared = rt.inline.prepare(history)
    light_log.append(prepared is not None)
    if prepared is None:
        prepared = rt.prepare_history(history)
        assert prepared is not None
    return prepared


def record(rt: SessionRuntime, reply: dict[str, Any], usage: dict[str, Any],
           light_log: list[bool]) -> None:
    recorded = rt.inline.record(reply, usage=usage, model="gpt-4o-mini")
    light_log.append(recorded)
    if not recorded:
        assert rt.record(reply, usage=usage, model="gpt-4o-mini") is True


def run_in_thread(call: Callable[[], Any]) -> Any:
    """``call()`` in a thread, with a hang guard (not a timing assert)."""
    out: list[Any] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            out.append(call())
        except BaseException as exc:  # reported in the test thread
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(HANG_GUARD)
    assert not thread.is_alive(), "the light call waited instead of returning"
    if errors:
        raise errors[0]
    return out[0]


class Holder:
    """Another thread inside ``store.db.write()`` (or holding a lock) until ``release()``."""

    def __init__(self, enter: Callable[[], Any]) -> None:
        self._enter = enter
        self._held = threading.Event()
        self._go = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with self._enter():
            self._held.set()
            self._go.wait(30)

    def __enter__(self) -> Holder:
        self._thread.start()
        assert self._held.wait(HANG_GUARD)
        return self

    def __exit__(self, *exc: object) -> None:
        self._go.set()
        self._thread.join(HANG_GUARD)
        assert not self._thread.is_alive()


# -- 1. several proxy turns ----------------------------------------------------------------------
def test_light_turns_store_each_message_once_and_match_the_worker_path(
        engines: list[Engine], normal_store: SQLiteStore, twin_store: Store) -> None:
    assert normal_store.commits_are_quick
    eng, twin_eng = make_engine(normal_store), make_engine(twin_store)
    engines.extend([eng, twin_eng])
    rt, twin = eng.open_session(new=True), twin_eng.open_session(new=True)
    history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, user("one")]
    prepared_light: list[bool] = []
    recorded_light: list[bool] = []
    totals = [0, 0, 0]
    for turn in range(6):
        prepared = prepare(rt, history, prepared_light)
        expected = twin.prepare_history(history)
        assert expected is not None
        assert prepared.messages == expected.messages
        assert prepared.tokens == expected.tokens
        assert prepared.compaction is None and expected.compaction is None
        reply = bot(f"answer {turn}")
        usage = {"prompt_tokens": 100 + turn, "completion_tokens": 7,
                 "prompt_tokens_details": {"cached_tokens": 50}}
        totals = [totals[0] + 100 + turn, totals[1] + 7, totals[2] + 50]
        record(rt, reply, usage, recorded_light)
        assert twin.record(reply, usage=usage, model="gpt-4o-mini") is True
        # the client re-sends everything, the reply with SDK extras
        history = [*history, {**reply, "refusal": None}, user(f"next {turn}")]

    assert prepared_light == [False] + [True] * 5  # only the first turn needed the worker
    assert recorded_light == [True] * 6
    expected_rows = [("user", "one")]
    for turn in range(6):
        expected_rows += [("assistant", f"answer {turn}")]
        if turn < 5:
            expected_rows += [("user", f"next {turn}")]
    assert contents(normal_store, rt.session_id) == expected_rows
    assert contents(twin_store, twin.session_id) == expected_rows
    assert message_count(normal_store, rt.session_id) == len(expected_rows)
    session = normal_store.get_session(rt.session_id)
    assert [session.input_tokens, session.output_tokens, session.cache_read_tokens] == totals
    assert len(normal_store.list_events(rt.session_id, "system_prompt")) == 1
    assert rt.user_turns == twin.user_turns == 6


def test_a_changed_history_needs_the_worker_and_is_synced_once(
        engines: list[Engine], normal_store: SQLiteStore) -> None:
    eng = make_engine(normal_store)
    engines.append(eng)
    rt = eng.open_session(new=True)
    history: list[dict[str, Any]] = [user("one")]
    log: list[bool] = []
    prepare(rt, history, log)
    record(rt, bot("first"), {"prompt_tokens": 10, "completion_tokens": 2}, log)
    # the client edited the reply: not the known chain, the store must rewind
    edited = [user("one"), bot("first, edited"), user("two")]
    before = message_count(normal_store, rt.session_id)
    assert rt.inline.prepare(edited) is None
    assert message_count(normal_store, rt.session_id) == before
    assert rt.prepare_history(edited) is not None
    assert contents(normal_store, rt.session_id) == [
        ("user", "one"), ("assistant", "first, edited"), ("user", "two")]


# -- 2. at the compaction / pre-compaction mark ------------------------------------------------
def test_over_the_limit_light_defers_and_the_worker_compacts_like_a_twin(
        engines: list[Engine], normal_store: SQLiteStore, twin_store: Store) -> None:
    eng, twin_eng = make_engine(normal_store, WINDOW), make_engine(twin_store, WINDOW)
    engines.extend([eng, twin_eng])
    rt, twin = eng.open_session(new=True), twin_eng.open_session(new=True)
    limit = min(rt.ops.threshold, rt.ops.pre_threshold)
    history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    deferred = 0  # known-history turns light mode sent to the worker because of the limit
    compactions = 0
    for i in range(14):
        history += tool_turn(i)
        known = rt.mirror.chain is not None  # the light path is open on the chain only
        checkpoints = len(normal_store.list_checkpoints(rt.session_id))
        light = rt.inline.prepare(history)
        # the fast path ran and the view was current: only the limit can have deferred it
        by_limit = light is None and known and rt.mirror.view is not None \
            and rt.mirror.view is rt.mirror.confirmed
        if by_limit:
            deferred += 1
            # nothing decided in light mode: no checkpoint, no background plan
            assert len(normal_store.list_checkpoints(rt.session_id)) == checkpoints
            assert not rt.precompactor.busy
        prepared = light if light is not None else rt.prepare_history(history)
        assert prepared is not None
        expected = twin.prepare_history(history)
        assert expected is not None
        if light is not None:
            assert light.tokens < limit
        if by_limit:
            assert (expected.tokens_before or expected.tokens) >= limit
        assert prepared.messages == expected.messages
        assert prepared.tokens == expected.tokens
        assert (prepared.compaction is None) == (expected.compaction is None)
        compactions += prepared.compaction is not None
        assert len(normal_store.list_checkpoints(rt.session_id)) == \
            len(twin_store.list_checkpoints(twin.session_id))
        reply = answer(i)
        # usage under the mark: the reply is recorded in light mode
        assert rt.inline.record(reply, usage={"prompt_tokens": 50, "completion_tokens": 5}) is True
        assert twin.record(reply, usage={"prompt_tokens": 50, "completion_tokens": 5})
        history.append(reply)
    assert deferred >= 1
    assert compactions >= 1
    assert contents(normal_store, rt.session_id) == contents(twin_store, twin.session_id)


def test_record_with_usage_over_the_limit_stores_nothing_in_light_mode(
        engines: list[Engine], normal_store: SQLiteStore, twin_store: Store) -> None:
    eng, twin_eng = make_engine(normal_store, WINDOW), make_engine(twin_store, WINDOW)
    engines.extend([eng, twin_eng])
    rt, twin = eng.open_session(new=True), twin_eng.open_session(new=True)
    history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    for i in range(3):
        history += tool_turn(i)
        for runtime in (rt, twin):
            assert runtime.prepare_history(history) is not None
        if i < 2:
            for runtime in (rt, twin):
                runtime.record(answer(i), usage={"prompt_tokens": 50, "completion_tokens": 5})
            history.append(answer(i))
    limit = min(rt.ops.threshold, rt.ops.pre_threshold)
    usage = {"prompt_tokens": limit, "completion_tokens": 9}
    before = message_count(normal_store, rt.session_id)
    totals = normal_store.get_session(rt.session_id).input_tokens
    assert rt.inline.record(answer(2), usage=usage) is False
    assert message_count(normal_store, rt.session_id) == before
    assert normal_store.get_session(rt.session_id).input_tokens == totals
    assert len(normal_store.list_checkpoints(rt.session_id)) == 0
    # the worker call: stored once, and the post-response policy runs as in the twin
    assert rt.record(answer(2), usage=usage) is True
    assert twin.record(answer(2), usage=usage) is True
    assert message_count(normal_store, rt.session_id) == before + 1
    assert normal_store.get_session(rt.session_id).input_tokens == totals + limit
    assert contents(normal_store, rt.session_id) == contents(twin_store, twin.session_id)
    assert len(normal_store.list_checkpoints(rt.session_id)) == \
        len(twin_store.list_checkpoints(twin.session_id))
    assert [m.message.get("content") for m in normal_store.get_messages(rt.session_id)
            ].count(answer(2)["content"]) == 1


def test_light_never_starts_background_precompaction(
        engines: list[Engine], normal_store: SQLiteStore) -> None:
    eng = make_engine(normal_store, WINDOW, background=True)
    engines.append(eng)
    rt = eng.open_session(new=True)
    history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    limit = min(rt.ops.threshold, rt.ops.pre_threshold)
    saw_deferral = False
    for i in range(8):
        history += tool_turn(i)
        light = rt.inline.prepare(history)
        if light is not None:
            assert light.tokens < limit
        elif rt.mirror.chain is not None:
            saw_deferral = True
            assert not rt.precompactor.busy  # the light call started nothing
        prepared = light or rt.prepare_history(history)
        assert prepared is not None
        rt.record(answer(i), usage={"prompt_tokens": 50, "completion_tokens": 5})
        history.append(answer(i))
        rt.precompactor.take(wait=True) if rt.precompactor.busy else None
    assert saw_deferral


# -- 3. busy ------------------------------------------------------------------------------------
def started_session(store: Store, engines: list[Engine]) -> tuple[SessionRuntime,
                                                                   list[dict[str, Any]]]:
    """A runtime with one recorded turn (the chain known) and the next history to send."""
    eng = make_engine(store)
    engines.append(eng)
    rt = eng.open_session(new=True)
    history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, user("one")]
    assert rt.prepare_history(history) is not None
    assert rt.inline.record(bot("first"), usage={"prompt_tokens": 20, "completion_tokens": 3}) is True
    return rt, [*history, bot("first"), user("two")]


def test_another_thread_writing_sends_light_calls_to_the_worker(
        engines: list[Engine], normal_store: SQLiteStore) -> None:
    rt, history = started_session(normal_store, engines)
    before = message_count(normal_store, rt.session_id)
    with Holder(normal_store.db.write):
        assert run_in_thread(lambda: rt.inline.prepare(history)) is None
        assert message_count(normal_store, rt.session_id) == before
    assert rt.prepare_history(history) is not None  # released: the worker call does it
    with Holder(normal_store.db.write):
        assert run_in_thread(lambda: rt.inline.record(bot("second"),
                                                      usage={"prompt_tokens": 30})) is False
        assert message_count(normal_store, rt.session_id) == before + 1
    assert rt.record(bot("second"), usage={"prompt_tokens": 30}) is True
    assert contents(normal_store, rt.session_id) == [
        ("user", "one"), ("assistant", "first"), ("user", "two"), ("assistant", "second")]
    assert normal_store.get_session(rt.session_id).input_tokens == 50


def test_another_thread_holding_the_database_lock_sends_light_calls_to_the_worker(
        engines: list[Engine], normal_store: SQLiteStore) -> None:
    rt, history = started_session(normal_store, engines)
    before = message_count(normal_store, rt.session_id)
    with Holder(lambda: normal_store.db._lock):
        assert run_in_thread(lambda: rt.inline.prepare(history)) is None
        assert run_in_thread(lambda: rt.inline.record(bot("x"))) is False
    assert message_count(normal_store, rt.session_id) == before
    assert rt.prepare_history(history) is not None
    assert rt.record(bot("second")) is True
    assert [c for _, c in contents(normal_store, rt.session_id)] == [
        "one", "first", "two", "second"]


def test_busy_light_record_keeps_the_next_turn_light(
        engines: list[Engine], normal_store: SQLiteStore) -> None:
    """A light record that found the store busy changed nothing: the next turn is still on the
    known-history fast path (light)."""
    rt, history = started_session(normal_store, engines)
    assert rt.inline.prepare(history) is not None
    with Holder(normal_store.db.write):
        assert run_in_thread(lambda: rt.inline.record(bot("second"))) is False
    assert rt.mirror.chain is not None  # nothing changed by the busy call
    assert rt.record(bot("second")) is True
    history = [*history, bot("second"), user("three")]
    assert rt.inline.prepare(history) is not None
    assert [c for _, c in contents(normal_store, rt.session_id)] == [
        "one", "first", "two", "second", "three"]


def test_another_connection_writing_does_not_make_light_calls_wait(
        engines: list[Engine], tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    # a long busy timeout: a light call that waited would trip the hang guard
    store = SQLiteStore(str(path), synchronous="NORMAL", busy_timeout_ms=60_000)
    try:
        rt, history = started_session(store, engines)
        before = message_count(store, rt.session_id)
        other = sqlite3.connect(str(path), isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            assert run_in_thread(lambda: rt.inline.prepare(history)) is None
            assert run_in_thread(lambda: rt.inline.record(bot("x"))) is False
            assert message_count(store, rt.session_id) == before
            other.execute("ROLLBACK")
        finally:
            other.close()
        # the worker call waits for another writer again (its busy timeout applies)
        other = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        try:
            other.execute("BEGIN IMMEDIATE")
            timer = threading.Timer(0.2, lambda: other.execute("ROLLBACK"))
            timer.start()
            assert run_in_thread(lambda: rt.prepare_history(history)) is not None
            timer.join()
        finally:
            other.close()
        assert rt.record(bot("second")) is True
        assert [c for _, c in contents(store, rt.session_id)] == [
            "one", "first", "two", "second"]
    finally:
        for engine in engines:
            engine.close()
        engines.clear()
        store.close()


def test_the_runtime_lock_held_elsewhere_sends_light_calls_to_the_worker(
        engines: list[Engine], normal_store: SQLiteStore) -> None:
    rt, history = started_session(normal_store, engines)
    before = message_count(normal_store, rt.session_id)
    with Holder(lambda: rt._lock):
        assert run_in_thread(lambda: rt.inline.prepare(history)) is None
        assert run_in_thread(lambda: rt.inline.record(bot("x"))) is False
    assert message_count(normal_store, rt.session_id) == before
    assert rt.inline.prepare(history) is not None  # free again: light works


# -- 4. stores without light mode ------------------------------------------------------------------
def turns_light(store: Store, engines: list[Engine]) -> tuple[list[bool], list[bool], str]:
    eng = make_engine(store)
    engines.append(eng)
    rt = eng.open_session(new=True)
    history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, user("u0")]
    prepared: list[bool] = []
    recorded: list[bool] = []
    for turn in range(4):
        prepare(rt, history, prepared)
        record(rt, bot(f"a{turn}"), {"prompt_tokens": 10, "completion_tokens": 1}, recorded)
        history = [*history, bot(f"a{turn}"), user(f"u{turn + 1}")]
    rows = [c for _, c in contents(store, rt.session_id)]
    assert rows == ["u0", "a0", "u1", "a1", "u2", "a2", "u3", "a3"]
    assert store.get_session(rt.session_id).input_tokens == 40
    return prepared, recorded, rt.session_id


def test_sqlite_full_never_uses_light_mode(engines: list[Engine], tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "full.db"), synchronous="FULL")
    try:
        assert not store.commits_are_quick
        prepared, recorded, _ = turns_light(store, engines)
        assert prepared == [False] * 4
        assert recorded == [False] * 4
    finally:
        for engine in engines:
            engine.close()
        engines.clear()
        store.close()


@pytest.mark.postgres
def test_postgres_never_uses_light_mode(engines: list[Engine], postgres_store: Store) -> None:
    prepared, recorded, _ = turns_light(postgres_store, engines)
    assert prepared == [False] * 4
    assert recorded == [False] * 4


def test_memory_sqlite_uses_light_mode(engines: list[Engine]) -> None:
    store = SQLiteStore(":memory:")
    try:
        assert store.commits_are_quick
        prepared, recorded, _ = turns_light(store, engines)
        assert prepared == [False, True, True, True]
        assert recorded == [True] * 4
    finally:
        for engine in engines:
            engine.close()
        engines.clear()
        store.close()


class TurnLog:
    """A memory manager that logs each finished turn it is handed (as the review would)."""

    store = None
    external = None
    builtin = None

    def __init__(self) -> None:
        self.turns: list[int] = []

    def sync_turn(self, messages: list[dict[str, Any]], *, tool_iterations: int,
                  session_id: str = "") -> None:
        self.turns.append(len(messages))

    def shutdown(self) -> None:
        pass


def test_deferred_after_turn_waits_for_finish_turn(normal_store: SQLiteStore) -> None:
    """``inline.record(hold_after_turn=True)`` stores the reply now and hands the turn to
    memory only at ``finish_turn()`` (the proxy calls it once ``[DONE]`` went out). A caller
    that does not call it has it run by the next ``prepare_history``, or by ``close``: no turn
    is lost or handed over twice."""
    memory = TurnLog()
    engine = Engine(normal_store, model="gpt-4o-mini", context_length=WIDE, memory=memory,
                    background_precompact=False)
    closed = False
    try:
        rt = engine.open_session(new=True)
        history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, user("one")]
        prepare(rt, history, [])
        record(rt, bot("first"), {}, [])
        assert memory.turns == [2]  # not deferred: handed over at once
        history += [bot("first"), user("two")]

        assert rt.inline.prepare(history) is not None
        assert rt.inline.record(bot("second"), hold_after_turn=True) is True
        assert contents(normal_store, rt.session_id)[-1] == ("assistant", "second")  # stored
        assert memory.turns == [2]  # held back
        rt.finish_turn()
        assert memory.turns == [2, 4]
        rt.finish_turn()
        assert memory.turns == [2, 4]  # once
        history += [bot("second"), user("three")]

        assert rt.inline.prepare(history) is not None
        assert rt.inline.record(bot("third"), hold_after_turn=True) is True
        assert memory.turns == [2, 4]
        history += [bot("third"), user("four")]
        assert rt.inline.prepare(history) is not None  # runs the held turn first
        assert memory.turns == [2, 4, 6]

        assert rt.inline.record(bot("fourth"), hold_after_turn=True) is True
        engine.close()
        closed = True
        assert memory.turns == [2, 4, 6, 8]  # closing the session ran it
    finally:
        if not closed:
            engine.close()


def test_record_refuses_a_message_that_is_not_the_reply(normal_store: SQLiteStore) -> None:
    """``record()`` stores the model's reply: a user, system or tool message handed to it was
    stored under its own role, as if the model had said it."""
    from refold.errors import InvalidInput

    engine = Engine(store=normal_store, context_length=8000, model="m")
    rt = engine.open_session()
    rt.prepare([{"role": "user", "content": "hi"}])
    for wrong in ({"role": "user", "content": "x"}, {"role": "system", "content": "x"},
                  {"role": "tool", "tool_call_id": "a", "content": "r"}, "text"):
        with pytest.raises(InvalidInput, match="must be an assistant message"):
            rt.record(wrong)  # type: ignore[arg-type]
    assert rt.record({"content": "no role: the reply's"}) is True
    assert [m.role for m in normal_store.get_messages(rt.session_id)] == ["user", "assistant"]
