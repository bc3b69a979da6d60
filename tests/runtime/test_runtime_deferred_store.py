"""The deferred store (``rt.inline.prepare(defer_store=True)`` + ``store_pending``):
the proxy builds a fast-path turn's request before its new messages are stored, sends it, then
stores them. What matters: every message is stored once, in order; ``store_pending`` says True
only when the request built was exactly what the ledger gives (a fresh build from
``Store.projection``); a busy store never makes the light call wait; a pending store nobody
settled is done by the next call.

Real SQLite files; another process is played by a second ``SQLiteStore`` on the same file.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from refold.messages.model import wire_form
from refold.runtime import Engine
from refold.runtime.session import SessionRuntime
from refold.store import Store
from refold.store.base import CheckpointDraft
from refold.store.sqlite import SQLiteStore

from ._helpers import WINDOW, tool_turn
from .test_runtime_light_mode import (
    Holder,
    bot,
    contents,
    make_engine,
    run_in_thread,
    started_session,
    user,
)


@pytest.fixture
def engines(normal_store: SQLiteStore) -> Iterator[list[Engine]]:
    """Engines a test made, closed before the store they use."""
    made: list[Engine] = []
    yield made
    for engine in made:
        engine.close()


def fresh(rt: SessionRuntime, store: Store) -> list[dict[str, Any]]:
    """What a runtime without any cache would send now."""
    return [wire_form(m) for m in rt.ops.build(store.projection(rt.session_id), rt.system_text())]


def test_the_request_is_built_first_and_the_store_confirms_it(
        engines: list[Engine], normal_store: SQLiteStore) -> None:
    rt, history = started_session(normal_store, engines)
    for turn in range(6):
        stored_before = contents(normal_store, rt.session_id)
        prepared = rt.inline.prepare(history, defer_store=True)
        assert prepared is not None
        assert rt.inline.has_pending
        assert contents(normal_store, rt.session_id) == stored_before  # not stored yet
        assert rt.inline.store_pending() is True
        assert not rt.inline.has_pending
        assert contents(normal_store, rt.session_id) == [
            *stored_before, ("user", history[-1]["content"])]
        assert prepared.messages == fresh(rt, normal_store)
        reads = rt.view_reads
        assert rt.inline.record(bot(f"r{turn}")) is True
        assert rt.view_reads == reads  # the view stayed current: no full read
        history += [bot(f"r{turn}"), user(f"q{turn}")]
        assert rt.inline.settle() is True  # nothing pending: True, nothing stored
    later = [x for t in range(6) for x in (f"r{t}", f"q{t}")][:-1]
    assert [c for _, c in contents(normal_store, rt.session_id)] == ["one", "first", "two",
                                                                     *later]


def test_several_new_messages_tool_results_included_are_stored_in_order(
        engines: list[Engine], normal_store: SQLiteStore) -> None:
    rt, history = started_session(normal_store, engines)
    assert rt.inline.prepare(history, defer_store=True) is not None
    assert rt.inline.store_pending() is True
    assert rt.inline.record(bot("calling"))
    history = [*history, bot("calling"), *tool_turn(7)]
    prepared = rt.inline.prepare(history, defer_store=True)
    assert prepared is not None and rt.inline.has_pending
    assert rt.inline.store_pending() is True
    assert prepared.messages == fresh(rt, normal_store)
    stored = [r.message for r in normal_store.get_messages(rt.session_id)]
    assert stored == [wire_form(m) for m in history[1:]]


def test_another_writer_before_the_turn_is_seen_and_nothing_is_deferred(
        engines: list[Engine], normal_store: SQLiteStore) -> None:
    """The session moved before the turn (another process served the last one): the deferred
    store is not used (its request would be void, a second upstream call): the turn takes the
    storing path, here the worker one."""
    rt, history = started_session(normal_store, engines)
    other = SQLiteStore(normal_store.db.path)
    try:
        other.append_messages(rt.session_id, [user("from elsewhere")])
        assert rt.inline.prepare(history, defer_store=True) is None
        assert not rt.inline.has_pending
        again = rt.prepare_history(history)
        assert again.messages == fresh(rt, normal_store)
        assert contents(normal_store, rt.session_id) == [
            ("user", "one"), ("assistant", "first"), ("user", "two")]  # the stray one rewound
    finally:
        other.close()


def _tip_reads(store: SQLiteStore, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    reads: list[str] = []
    real = store.view_tip
    monkeypatch.setattr(store, "view_tip", lambda sid: reads.append(sid) or real(sid))
    return reads


def test_a_turn_after_our_own_commit_reads_no_tip(
        engines: list[Engine], normal_store: SQLiteStore,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing committed since this runtime's own last append (the store's commit mark is
    unchanged): the deferred turn needs no ``view_tip`` read, and is still exact."""
    rt, history = started_session(normal_store, engines)
    reads = _tip_reads(normal_store, monkeypatch)
    for turn in range(3):
        prepared = rt.inline.prepare(history, defer_store=True)
        assert prepared is not None and rt.inline.has_pending
        assert rt.inline.store_pending() is True
        assert prepared.messages == fresh(rt, normal_store)
        assert rt.inline.record(bot(f"r{turn}")) is True
        history += [bot(f"r{turn}"), user(f"q{turn}")]
    assert reads == []


def test_a_write_in_this_process_between_turns_is_seen(
        engines: list[Engine], normal_store: SQLiteStore) -> None:
    """The same connection wrote to the session (another runtime or endpoint of this process):
    the mark moved, so the tip is read, the move is seen, and nothing is deferred."""
    rt, history = started_session(normal_store, engines)
    normal_store.append_messages(rt.session_id, [user("from this process")])
    assert rt.inline.prepare(history, defer_store=True) is None
    assert not rt.inline.has_pending
    again = rt.prepare_history(history)
    assert again.messages == fresh(rt, normal_store)


def test_another_process_writing_elsewhere_costs_one_tip_read(
        engines: list[Engine], normal_store: SQLiteStore,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process committed to another session: the mark moved, the tip is read once,
    and as this session did not move the turn is still deferred."""
    rt, history = started_session(normal_store, engines)
    other = SQLiteStore(normal_store.db.path)
    try:
        elsewhere = other.create_session(title="elsewhere")
        other.append_messages(elsewhere.id, [user("unrelated")])
        reads = _tip_reads(normal_store, monkeypatch)
        prepared = rt.inline.prepare(history, defer_store=True)
        assert prepared is not None and rt.inline.has_pending
        assert reads == [rt.session_id]
        assert rt.inline.store_pending() is True
        assert prepared.messages == fresh(rt, normal_store)
    finally:
        other.close()


def test_another_writer_appending_voids_the_request_and_stores_nothing(
        engines: list[Engine], normal_store: SQLiteStore) -> None:
    """The race the tip check cannot close: the other write lands after the request was built
    on the cached view and before its deferred store."""
    rt, history = started_session(normal_store, engines)
    other = SQLiteStore(normal_store.db.path)
    try:
        assert rt.inline.prepare(history, defer_store=True) is not None
        other.append_messages(rt.session_id, [user("from elsewhere")])
        assert rt.inline.store_pending() is False  # the tip moved: the request is void
        assert not rt.inline.has_pending
        assert contents(normal_store, rt.session_id)[-1] == ("user", "from elsewhere")
        again = rt.inline.prepare(history, defer_store=True)
        assert again is None  # no cached view any more: the worker path
        again = rt.prepare_history(history)
        assert again is not None and not rt.inline.has_pending
        assert again.messages == fresh(rt, normal_store)
        assert contents(normal_store, rt.session_id) == [
            ("user", "one"), ("assistant", "first"), ("user", "two")]  # the stray one rewound
    finally:
        other.close()


def test_another_writer_compacting_voids_the_request_but_keeps_the_messages(
        engines: list[Engine], normal_store: SQLiteStore) -> None:
    """A checkpoint added elsewhere (after the request was built) leaves the tip where it was:
    the messages are stored (once) but the request, built on the old view, is void; the next
    prepare sends the compacted view."""
    rt, history = started_session(normal_store, engines)
    for turn in range(3):
        assert rt.inline.prepare(history, defer_store=True) is not None
        assert rt.inline.store_pending() is True
        assert rt.inline.record(bot(f"r{turn}"))
        history += [bot(f"r{turn}"), user(f"q{turn}")]
    stale = rt.inline.prepare(history, defer_store=True)
    assert stale is not None
    other = SQLiteStore(normal_store.db.path)
    try:  # lands after the request was built on the cached view, before its store
        other.add_checkpoint(rt.session_id, CheckpointDraft(
            "SUMMARY-BY-OTHER: the first questions were answered", first_seq=1, last_seq=4,
            tail_start_seq=5))
    finally:
        other.close()
    assert rt.inline.store_pending() is False
    assert contents(normal_store, rt.session_id)[-1] == ("user", "q2")  # stored, once
    assert stale.messages != fresh(rt, normal_store)  # indeed void
    redone = rt.prepare_history(history)
    assert redone is not None
    assert redone.messages == fresh(rt, normal_store)
    assert any("SUMMARY-BY-OTHER" in str(m.get("content")) for m in redone.messages)
    assert [c for _, c in contents(normal_store, rt.session_id)].count("q2") == 1


def test_a_busy_store_leaves_the_store_pending_for_a_worker(
        engines: list[Engine], normal_store: SQLiteStore) -> None:
    rt, history = started_session(normal_store, engines)
    assert rt.inline.prepare(history, defer_store=True) is not None
    with Holder(normal_store.db.write):
        assert run_in_thread(lambda: rt.inline.store_pending()) is None  # did not wait
        assert rt.inline.has_pending
    assert run_in_thread(lambda: rt.inline.settle()) is True
    assert contents(normal_store, rt.session_id)[-1] == ("user", "two")
    assert rt.inline.record(bot("second")) is True
    assert [c for _, c in contents(normal_store, rt.session_id)] == [
        "one", "first", "two", "second"]


def test_a_pending_store_nobody_settled_is_done_by_the_next_call(
        engines: list[Engine], normal_store: SQLiteStore) -> None:
    rt, history = started_session(normal_store, engines)
    assert rt.inline.prepare(history, defer_store=True) is not None
    assert rt.record(bot("second")) is True  # stores "two" first, then the reply
    assert [c for _, c in contents(normal_store, rt.session_id)] == [
        "one", "first", "two", "second"]
    history = [*history, bot("second"), user("three")]
    assert rt.inline.prepare(history, defer_store=True) is not None
    again = rt.prepare_history(history)  # the worker call, the store still pending
    assert again is not None and not rt.inline.has_pending
    assert again.messages == fresh(rt, normal_store)
    assert [c for _, c in contents(normal_store, rt.session_id)] == [
        "one", "first", "two", "second", "three"]


def test_a_new_system_prompt_is_not_deferred(engines: list[Engine],
                                             normal_store: SQLiteStore) -> None:
    rt, history = started_session(normal_store, engines)
    history[0] = {"role": "system", "content": "A different system prompt."}
    prepared = rt.inline.prepare(history, defer_store=True)
    assert prepared is not None and not rt.inline.has_pending  # stored at once, with its event
    assert normal_store.list_events(rt.session_id, "system_prompt")[-1].payload["text"] == \
        "A different system prompt."


def test_over_the_limit_the_deferred_turn_is_stored_and_handed_to_the_worker(
        engines: list[Engine], normal_store: SQLiteStore, tmp_path: Path) -> None:
    """At the compaction mark light mode gives up; the deferred messages are stored before it
    does (as without deferral), and the worker call compacts exactly like a twin that never
    used light mode. Either way the messages to send are in wire form (the proxy sends them
    as they are)."""
    twin_store = SQLiteStore(str(tmp_path / "twin.db"), synchronous="NORMAL")
    try:
        eng, twin_eng = make_engine(normal_store, WINDOW), make_engine(twin_store, WINDOW)
        engines.extend([eng, twin_eng])
        rt, twin = eng.open_session(new=True), twin_eng.open_session(new=True)
        history: list[dict[str, Any]] = [{"role": "system", "content": "Be careful."}]
        gave_up = compactions = 0
        for i in range(14):
            # in-process "_" keys on what the client sends never reach the wire
            history += [dict(m, _client_note=i) for m in tool_turn(i)]
            light = rt.inline.prepare(history, defer_store=True)
            if light is not None:
                assert rt.inline.store_pending() is True
            else:
                gave_up += 1
                assert not rt.inline.has_pending  # stored before giving up
            prepared = light if light is not None else rt.prepare_history(history)
            expected = twin.prepare_history(history)
            assert prepared is not None and expected is not None
            assert prepared.messages == expected.messages
            assert not [k for m in prepared.messages for k in m if k.startswith("_")]
            compactions += prepared.compaction is not None
            reply = {"role": "assistant", "content": f"answer {i}"}
            usage = {"prompt_tokens": 50, "completion_tokens": 5}
            if not rt.inline.record(reply, usage=usage):
                rt.record(reply, usage=usage)
            twin.record(reply, usage=usage)
            history.append(reply)
        assert gave_up >= 1 and compactions >= 1
        assert contents(normal_store, rt.session_id) == contents(twin_store, twin.session_id)
    finally:
        for engine in engines:
            engine.close()
        engines.clear()
        twin_store.close()


def test_closing_with_a_pending_store_stores_it(engines: list[Engine],
                                                normal_store: SQLiteStore) -> None:
    rt, history = started_session(normal_store, engines)
    assert rt.inline.prepare(history, defer_store=True) is not None
    rt.close()
    assert not rt.inline.has_pending
    assert contents(normal_store, rt.session_id)[-1] == ("user", "two")
