"""Background pre-compaction: computed from the pre-threshold on, swapped in at the crossing
turn, discarded when the history changed under it."""

from __future__ import annotations

from pathlib import Path

from refold.runtime import Engine, SessionRuntime
from refold.store import Store

from ._helpers import WINDOW, answer, tool_turn

SYSTEM = "You are a test agent."


def _feed_until(rt: SessionRuntime, start: int, stop) -> int:  # type: ignore[no-untyped-def]
    i = start
    while not stop() and i < start + 200:
        rt.prepare(tool_turn(i, size=100), system_prompt=SYSTEM)
        rt.record(answer(i))
        i += 1
    assert stop(), "condition never reached"
    return i


def test_plan_started_at_pre_threshold_and_used_at_crossing(engine: Engine,
                                                            store: Store) -> None:
    rt = engine.open_session(new=True)
    i = _feed_until(rt, 0, lambda: rt.precompactor.started > 0)
    assert rt.prepare([], system_prompt=SYSTEM).tokens < engine.ops.threshold
    rt.precompactor.join()
    crossing = None
    while crossing is None and i < 200:
        prepared = rt.prepare(tool_turn(i, size=100), system_prompt=SYSTEM)
        rt.record(answer(i))
        crossing = prepared if prepared.compaction is not None else None
        i += 1
    assert crossing is not None
    assert rt.precompactor.used == 1 and rt.precompactor.discarded == 0
    assert crossing.tokens < engine.ops.threshold
    # messages appended after the snapshot are in the tail, nothing is lost from the view
    assert crossing.messages[-1] == tool_turn(i - 1, size=100)[-1]
    assert len(store.list_checkpoints(rt.session_id)) == 1


def test_plan_discarded_after_rewind_inside_its_span(engine: Engine, store: Store) -> None:
    rt = engine.open_session(new=True)
    i = _feed_until(rt, 0, lambda: rt.precompactor.started > 0)
    rt.precompactor.join()
    # rewind from the 2nd user message: rows the plan summarizes become inactive
    second_user = [r for r in store.get_messages(rt.session_id) if r.role == "user"][1]
    store.rewind(rt.session_id, second_user.seq)
    crossed = False
    while not crossed and i < 400:
        prepared = rt.prepare(tool_turn(i, size=100), system_prompt=SYSTEM)
        rt.record(answer(i))
        crossed = prepared.compaction is not None
        i += 1
    assert crossed
    assert rt.precompactor.used == 0 and rt.precompactor.discarded >= 1
    checkpoint = store.latest_checkpoint(rt.session_id)
    assert checkpoint is not None
    active = {r.seq for r in store.get_messages(rt.session_id)}
    assert checkpoint.tail_start_seq in active or checkpoint.tail_start_seq > max(active)


def test_without_background_nothing_is_started(store: Store, tmp_path: Path) -> None:
    with Engine(store, model="gpt-4o-mini", context_length=WINDOW,
                background_precompact=False) as engine:
        rt = engine.open_session(new=True)
        compacted = False
        for i in range(60):
            prepared = rt.prepare(tool_turn(i, size=100), system_prompt=SYSTEM)
            rt.record(answer(i))
            compacted = compacted or prepared.compaction is not None
        assert compacted and rt.precompactor.started == 0


def test_close_joins_background_work(store: Store) -> None:
    engine = Engine(store, model="gpt-4o-mini", context_length=WINDOW)
    rt = engine.open_session(new=True)
    _feed_until(rt, 0, lambda: rt.precompactor.started > 0)
    engine.close()
    assert engine.executor._shutdown  # type: ignore[attr-defined]
    engine.close()  # idempotent


def test_proxy_history_edit_discards_the_plan(engine: Engine, store: Store) -> None:
    rt = engine.open_session(new=True)
    history: list[dict] = [{"role": "system", "content": "client system"}]
    i = 0
    while rt.precompactor.started == 0 and i < 200:
        history += tool_turn(i, size=100)
        rt.prepare_history(history)
        reply = answer(i)
        rt.record(reply)
        history.append(reply)
        i += 1
    assert rt.precompactor.started == 1
    # the client rewrites its 2nd user message (an edit-and-resend): the ledger rewinds
    edited = [dict(m) for m in history]
    second_user = [k for k, m in enumerate(edited) if m["role"] == "user"][1]
    edited = [*edited[:second_user], {"role": "user", "content": "a different request"}]
    rt.prepare_history(edited)
    assert rt.precompactor.discarded == 1 and not rt.precompactor.busy
    rows = store.get_messages(rt.session_id)
    assert rows[-1].message["content"] == "a different request"


def test_runtime_still_works_after_engine_close(store: Store) -> None:
    engine = Engine(store, model="gpt-4o-mini", context_length=WINDOW)
    rt = engine.open_session(new=True)
    engine.close()
    compacted = False
    for i in range(40):  # crossing the pre-threshold must not try the closed pool
        prepared = rt.prepare(tool_turn(i, size=100), system_prompt=SYSTEM)
        rt.record(answer(i))
        compacted = compacted or prepared.compaction is not None
    assert compacted and rt.precompactor.started == 0
