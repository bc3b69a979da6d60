"""The runtime's cached projection (``refold.runtime.view``): a turn that follows the runtime's
own writes reuses it (no ``Store.projection`` read), and it always equals a fresh build from
``Store.projection`` — after many turns, the runtime's own compaction, another store handle
appending to or compacting the same session, a rewind, a branch.

The stores are real (both backends; a second ``SQLiteStore`` on the same file plays another
process); ``SpyStore`` only counts ``projection`` reads.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from refold.compaction import compact_session
from refold.messages.model import wire_form
from refold.runtime import Engine
from refold.runtime.session import SessionRuntime
from refold.store import Store
from refold.store.sqlite import SQLiteStore

from ._helpers import WINDOW, answer, tool_turn

SYSTEM = "You are a careful assistant."


class SpyStore:
    """The real store, counting full projection reads."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.projections = 0

    def projection(self, session_id: str) -> Any:
        self.projections += 1
        return self._store.projection(session_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def make_engine(store: Any, tmp_path: Path, window: int = WINDOW) -> Engine:
    return Engine(store, model="gpt-4o-mini", context_length=window,
                  memory_dir=tmp_path / "memories", background_precompact=False)


@pytest.fixture
def spy(store: Store) -> SpyStore:
    return SpyStore(store)


@pytest.fixture
def eng(spy: SpyStore, tmp_path: Path) -> Iterator[Engine]:
    engine = make_engine(spy, tmp_path)
    yield engine
    engine.close()


def fresh(rt: SessionRuntime, store: Store) -> list[dict[str, Any]]:
    """What a runtime without any cache would send now: built from ``Store.projection``."""
    return [wire_form(m) for m in rt.ops.build(store.projection(rt.session_id), rt.system_text())]


def assert_view_matches(rt: SessionRuntime, store: Store, prepared: Any) -> None:
    assert prepared.messages == fresh(rt, store)
    assert prepared.tokens == rt.ops.count(prepared.messages, rt._tools)
    view = rt.mirror.view
    if view is not None:  # the cache itself, as the next turn would use it
        assert view.view == rt.ops.build(store.projection(rt.session_id), None)
        assert view.tokens == sum(map(rt.ops.base_count, view.view))


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def test_proxy_turns_reuse_the_view(eng: Engine, spy: SpyStore, store: Store) -> None:
    rt = eng.open_session(new=True)
    history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, user("hello")]
    for turn in range(30):
        before = spy.projections
        prepared = rt.prepare_history(history)
        assert_view_matches(rt, store, prepared)
        rt.record(answer(turn), usage={"prompt_tokens": prepared.tokens + 7,
                                       "completion_tokens": 5})
        if turn:  # the first turn reads; every later one follows the runtime's own writes
            assert spy.projections == before
        history += [answer(turn), user(f"next {turn}")]
    assert rt.view_reads == 1
    # calibration learned from the readings: the cached sum is still scaled exactly
    prepared = rt.prepare_history(history)
    assert_view_matches(rt, store, prepared)


def test_library_turns_reuse_the_view_through_compaction(eng: Engine, spy: SpyStore,
                                                         store: Store) -> None:
    rt = eng.open_session(new=True)
    compactions = 0
    for i in range(14):
        before = spy.projections
        prepared = rt.prepare(tool_turn(i), system_prompt=SYSTEM)
        assert_view_matches(rt, store, prepared)
        compacted = prepared.compaction is not None
        compactions += compacted
        rt.record(answer(i), usage={"prompt_tokens": prepared.tokens,
                                    "completion_tokens": 9})
        if i and not compacted and rt.mirror.view is not None:
            assert spy.projections == before  # no read on a turn the runtime fully knows
    assert compactions >= 1 and store.list_checkpoints(rt.session_id)
    prepared = rt.prepare([user("status?")])
    assert_view_matches(rt, store, prepared)
    assert rt.view_reads < 14  # reads only after a compaction (and the first turn)


def test_another_handle_appending_is_noticed(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.db")
    mine, other = SQLiteStore(path), SQLiteStore(path)
    spy = SpyStore(mine)
    engine = make_engine(spy, tmp_path, window=100_000)
    try:
        rt = engine.open_session(new=True)
        history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, user("one")]
        rt.prepare_history(history)
        rt.record(answer(1))
        other.append_messages(rt.session_id, [user("from elsewhere")])
        prepared = rt.prepare([user("mine")])  # library path: expect_last fails, re-read
        assert [m["content"] for m in prepared.messages[-2:]] == ["from elsewhere", "mine"]
        assert_view_matches(rt, mine, prepared)
        reads = spy.projections
        rt.record(answer(2))
        other.append_messages(rt.session_id, [user("again")])
        prepared = rt.prepare([])  # nothing appended by us: the tip check alone notices
        assert spy.projections == reads + 1
        assert prepared.messages[-1]["content"] == "again"
        assert_view_matches(rt, mine, prepared)
    finally:
        engine.close()
        mine.close()
        other.close()


def test_another_handle_compacting_is_noticed(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.db")
    mine, other = SQLiteStore(path), SQLiteStore(path)
    spy = SpyStore(mine)
    engine = make_engine(spy, tmp_path, window=100_000)
    try:
        rt = engine.open_session(new=True)
        history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
        for i in range(8):
            history += [*tool_turn(i), answer(i)]
        rt.prepare_history(history)
        rt.record(answer(99))
        history.append(answer(99))
        done = compact_session(other, rt.session_id, context_length=4_000, model="gpt-4o-mini",
                               holder="other-process")
        assert done.stored and done.checkpoint is not None
        reads = spy.projections
        prepared = rt.prepare_history([*history, user("go on")])  # tip unchanged, checkpoint new
        assert spy.projections == reads + 1
        assert_view_matches(rt, mine, prepared)
        assert len(prepared.messages) < len(history)  # the other process's compacted view
        prepared = rt.prepare_history([*history, user("go on"), answer(100), user("more")])
        assert spy.projections == reads + 1  # and from there on the cache again
        assert_view_matches(rt, mine, prepared)
    finally:
        engine.close()
        mine.close()
        other.close()


def test_rewind_and_branch_rebuild(eng: Engine, spy: SpyStore, store: Store) -> None:
    rt = eng.open_session(new=True)
    for i in range(3):
        rt.prepare([user(f"question {i}")], system_prompt=SYSTEM)
        rt.record(answer(i))
    rows = store.get_messages(rt.session_id)
    store.rewind(rt.session_id, rows[-2].seq)  # drop the last question and its answer
    prepared = rt.prepare([user("question 2, reworded")])
    assert_view_matches(rt, store, prepared)
    assert "question 2" not in [m.get("content") for m in prepared.messages]
    branch = eng.open_session(rt.session_id, branch_at=rows[1].seq, title="b")
    prepared = branch.prepare([user("on the branch")], system_prompt=SYSTEM)
    assert_view_matches(branch, store, prepared)
    assert [m["content"] for m in prepared.messages[1:]] == [
        "question 0", answer(0)["content"], "on the branch"]
    # the original runtime is unaffected by the branch and keeps using its view
    reads = spy.projections
    prepared = rt.prepare([user("back on main")])
    assert spy.projections == reads
    assert_view_matches(rt, store, prepared)


def test_rewind_then_same_content_reappended_is_noticed(eng: Engine, store: Store) -> None:
    """Identities chain by content, so a rewound tail appended again has the same tip identity
    — but new seqs: the tip check compares the seq too."""
    rt = eng.open_session(new=True)
    rt.prepare([user("a")], system_prompt=SYSTEM)
    rt.record(answer(1))
    rows = store.get_messages(rt.session_id)
    store.rewind(rt.session_id, rows[0].seq)
    store.append_messages(rt.session_id, [user("a"), answer(1)])
    assert store.get_messages(rt.session_id)[-1].identity == rows[-1].identity
    for more in ([], [user("b")]):  # the tip check alone, then an append after the tip
        prepared = rt.prepare(more)
        assert_view_matches(rt, store, prepared)
        assert rt.mirror.view is not None and [r.seq for r in rt.mirror.view.rows] == [
            r.seq for r in store.projection(rt.session_id).messages]


def test_caller_editing_prepared_messages_cannot_alter_the_view(eng: Engine,
                                                                 store: Store) -> None:
    rt = eng.open_session(new=True)
    turn = tool_turn(1)
    prepared = rt.prepare(turn, system_prompt=SYSTEM)
    call = next(m for m in prepared.messages if m.get("tool_calls"))
    call["tool_calls"][0]["function"]["name"] = "edited"
    call["role"] = "edited"
    prepared = rt.prepare([user("next")])
    assert_view_matches(rt, store, prepared)
    assert "edited" not in str(prepared.messages)


def test_recall_block_is_counted_on_top_of_the_running_sum(eng: Engine, store: Store) -> None:
    rt = eng.open_session(new=True)
    rt.prepare([user("first")], system_prompt=SYSTEM)
    rt.record(answer(1))
    rt.prepare([user("second")])
    # what a memory provider's prefetch sets when a user turn starts; [] = the same turn again
    rt._recall = "<recalled-memory>\nthe user prefers short answers\n</recalled-memory>"
    prepared = rt.prepare([])
    assert prepared.messages[-1]["content"].endswith("</recalled-memory>")
    assert prepared.tokens == rt.ops.count(prepared.messages, None)
    assert rt.mirror.view is not None and rt.mirror.view.view[-1]["content"] == "second"  # not stored
    assert store.get_messages(rt.session_id)[-1].message["content"] == "second"
