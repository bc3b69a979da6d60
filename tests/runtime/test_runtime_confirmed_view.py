"""The runtime's confirmed view: a turn whose own appends (``expect_last``) report a store tip
equal to the cached view (``AppendResult.tip``) skips the ``view_tip`` read; the memory review
gets its rows from that view (``recent_rows``); usage moves in the reply's own append.

Correctness is what matters: whatever another writer did (a second store handle on the same
file, a second runtime) the prepared messages equal a fresh build from ``Store.projection``.
The stores are real; ``CountingStore`` only counts calls and forwards everything.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from refold.messages.model import wire_form
from refold.runtime import Engine
from refold.runtime.engine import REVIEW_WINDOW
from refold.runtime.prepared import Prepared
from refold.runtime.session import SessionRuntime
from refold.store import Store
from refold.store.base import CheckpointDraft
from refold.store.sqlite import SQLiteStore

from ._helpers import answer

SYSTEM = "You are a careful assistant."
WIDE = 200_000  # no compaction of its own in these tests


class CountingStore:
    """The real store, counting view-tip reads, projection reads and add_usage calls."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.view_tips = 0
        self.projections = 0
        self.add_usages = 0

    def view_tip(self, session_id: str) -> Any:
        self.view_tips += 1
        return self._store.view_tip(session_id)

    def projection(self, session_id: str) -> Any:
        self.projections += 1
        return self._store.projection(session_id)

    def add_usage(self, session_id: str, **kw: Any) -> None:
        self.add_usages += 1
        self._store.add_usage(session_id, **kw)

    def reads(self) -> tuple[int, int]:
        return self.view_tips, self.projections

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class ReviewRecorder:
    """A memory manager that only records what each finished turn hands to review."""

    store = None
    external = None
    builtin = None

    def __init__(self) -> None:
        self.turns: list[list[dict[str, Any]]] = []

    def sync_turn(self, messages: list[dict[str, Any]], *, tool_iterations: int,
                  session_id: str = "") -> None:
        self.turns.append([dict(m) for m in messages])

    def shutdown(self) -> None:
        pass


def make_engine(store: Any, memory: Any = None, window: int = WIDE) -> Engine:
    return Engine(store, model="gpt-4o-mini", context_length=window, memory=memory,
                  background_precompact=False)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def fresh(rt: SessionRuntime, store: Store) -> list[dict[str, Any]]:
    """What a runtime without any cache would send now: built from ``Store.projection``."""
    return [wire_form(m) for m in rt.ops.build(store.projection(rt.session_id), rt.system_text())]


def prep(rt: SessionRuntime, history: list[dict[str, Any]]) -> Prepared:
    """``prepare_history``, always answered with the messages to send."""
    prepared = rt.prepare_history(history)
    assert prepared is not None
    return prepared


def review_rows(store: Store, session_id: str) -> list[dict[str, Any]]:
    """What the engine reads for review without a view: the window up to the last row."""
    last = store.last_message(session_id)
    assert last is not None
    return [m.message for m in store.messages_around(session_id, last.seq,
                                                     before=REVIEW_WINDOW - 1, after=0)]


@pytest.fixture
def counting(store: Store) -> CountingStore:
    return CountingStore(store)


@pytest.fixture
def eng(counting: CountingStore) -> Iterator[Engine]:
    engine = make_engine(counting)
    yield engine
    engine.close()


@pytest.fixture
def shared(tmp_path: Path) -> Iterator[tuple[SQLiteStore, SQLiteStore]]:
    """Two handles on one SQLite file: ``mine`` for the runtime, ``other`` plays another
    process."""
    path = str(tmp_path / "shared.db")
    mine, other = SQLiteStore(path), SQLiteStore(path)
    yield mine, other
    mine.close()
    other.close()


# -- (i) the fast path reads no view tip; other writers are still noticed ---------------------
def test_a_proxy_turn_on_the_fast_path_reads_no_view_tip(eng: Engine, counting: CountingStore,
                                                         store: Store) -> None:
    rt = eng.open_session(new=True)
    history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, user("hello")]
    for turn in range(12):
        before = counting.reads()
        prepared = prep(rt, history)
        assert prepared.messages == fresh(rt, store)
        rt.record(answer(turn))
        if turn == 0:  # the first turn knows nothing yet: it reads
            assert counting.view_tips >= 1 and counting.projections >= 1
        else:  # its own appends confirmed the cached view: no read of any kind
            assert counting.reads() == before, f"turn {turn} read the store"
        history += [answer(turn), user(f"next {turn}")]
    assert rt.view_reads == 1


def test_the_library_path_also_reads_no_view_tip(eng: Engine, counting: CountingStore,
                                                 store: Store) -> None:
    rt = eng.open_session(new=True)
    rt.prepare([user("first")], system_prompt=SYSTEM)
    rt.record(answer(0))
    for turn in range(1, 6):
        before = counting.reads()
        prepared = rt.prepare([user(f"q{turn}")])
        assert prepared.messages == fresh(rt, store)
        rt.record(answer(turn))
        assert counting.reads() == before
    # a turn that appends nothing has no append to confirm the view: one tip read, no more
    tips = counting.view_tips
    prepared = rt.prepare([])
    assert prepared.messages == fresh(rt, store)
    assert counting.view_tips == tips + 1


def test_another_runtime_appending_is_noticed(shared: tuple[SQLiteStore, SQLiteStore]) -> None:
    mine, other = shared
    counting = CountingStore(mine)
    engine, engine_b = make_engine(counting), make_engine(other)
    try:
        rt = engine.open_session(new=True)
        history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, user("one")]
        rt.prepare_history(history)
        rt.record(answer(1))
        history += [answer(1), user("two")]
        rt.prepare_history(history)
        rt.record(answer(2))
        history.append(answer(2))
        # a second proxy instance serves the next turn of the same conversation
        rt_b = engine_b.open_session(rt.session_id)
        history.append(user("three, via B"))
        rt_b.prepare_history(history)
        reply_b = {"role": "assistant", "content": "answered by B"}
        rt_b.record(reply_b)
        history += [reply_b, user("four, back on A")]
        reads = counting.view_tips
        prepared = prep(rt, history)  # A's expect_last fails: synced, re-read
        assert counting.view_tips > reads
        assert prepared.messages == fresh(rt, mine)
        assert [m["content"] for m in prepared.messages[-3:]] == [
            "three, via B", "answered by B", "four, back on A"]
        assert [m.message["content"] for m in mine.get_messages(rt.session_id)][-3:] == [
            "three, via B", "answered by B", "four, back on A"]
        rt.record(answer(4))
        history += [answer(4), user("five")]
        before = counting.reads()
        prepared = prep(rt, history)  # and from there on the fast path again
        assert counting.reads() == before
        assert prepared.messages == fresh(rt, mine)
    finally:
        engine.close()
        engine_b.close()


def test_another_handle_appending_a_row_is_noticed(
        shared: tuple[SQLiteStore, SQLiteStore]) -> None:
    mine, other = shared
    counting = CountingStore(mine)
    engine = make_engine(counting)
    try:
        rt = engine.open_session(new=True)
        history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, user("one")]
        rt.prepare_history(history)
        rt.record(answer(1))
        history.append(answer(1))
        other.append_messages(rt.session_id, [user("from elsewhere")])
        # the client's history has it too (it came through another instance)
        history += [user("from elsewhere"), answer(2), user("mine")]
        prepared = prep(rt, history)
        assert prepared.messages == fresh(rt, mine)
        assert [m["content"] for m in prepared.messages[-4:-2]] == [
            "Module 1: the failures come from off-by-one errors in src/mod1.py; fixed.",
            "from elsewhere"]
        # a row appended while the client's history is already stored: the reply's
        # expect_last fails, and the reply goes right after its question, the other row
        # rewound (reversibly) as a request re-sending that history would place it
        other.append_messages(rt.session_id, [user("late, from elsewhere")])
        rt.record(answer(3))
        stored = [m.message["content"] for m in mine.get_messages(rt.session_id)]
        assert stored[-2:] == ["mine", answer(3)["content"]]
        assert mine.list_rewinds(rt.session_id)
        reads = counting.view_tips
        prepared = rt.prepare([user("after")])
        assert prepared.messages == fresh(rt, mine)
        assert [m["content"] for m in prepared.messages[-3:]] == [
            "mine", answer(3)["content"], "after"]
        assert counting.view_tips == reads + 1  # no view to confirm: checked and re-read
    finally:
        engine.close()


def test_another_handle_adding_a_checkpoint_is_noticed(
        shared: tuple[SQLiteStore, SQLiteStore]) -> None:
    """A checkpoint moves no row: the fast path's expect_last still matches, and only the
    append's tip (its checkpoint id) tells the cached view is stale."""
    mine, other = shared
    counting = CountingStore(mine)
    engine = make_engine(counting)
    try:
        rt = engine.open_session(new=True)
        history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
        for i in range(4):
            history.append(user(f"question {i}"))
            rt.prepare_history(history)
            rt.record(answer(i))
            history.append(answer(i))
        rows = mine.get_messages(rt.session_id)
        assert len(rows) == 8
        made = other.add_checkpoint(rt.session_id, CheckpointDraft(
            "SUMMARY-BY-OTHER: questions 0 and 1 were answered", first_seq=1, last_seq=4,
            tail_start_seq=5))
        history.append(user("question 4"))
        before = counting.reads()
        prepared = prep(rt, history)
        assert counting.view_tips == before[0] + 1  # not confirmed: checked, then re-read
        assert counting.projections == before[1] + 1
        assert prepared.messages == fresh(rt, mine)
        text = "\n".join(str(m.get("content")) for m in prepared.messages)
        assert "SUMMARY-BY-OTHER" in text
        assert "question 0" not in text and "question 2" in text
        rt.record(answer(4))
        history += [answer(4), user("question 5")]
        before = counting.reads()
        prepared = prep(rt, history)  # the re-read view, confirmed again
        assert counting.reads() == before
        assert prepared.messages == fresh(rt, mine)
        assert mine.view_tip(rt.session_id).checkpoint_id == made.id
    finally:
        engine.close()


def test_another_handle_rewinding_and_reappending_is_noticed(
        shared: tuple[SQLiteStore, SQLiteStore]) -> None:
    """The same content appended again has the same identity but a new seq: the append's
    rows do not follow the cached view, so it is not confirmed."""
    mine, other = shared
    counting = CountingStore(mine)
    engine = make_engine(counting)
    try:
        rt = engine.open_session(new=True)
        history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, user("one")]
        rt.prepare_history(history)
        rt.record(answer(1))
        last = mine.last_message(rt.session_id)
        assert last is not None and last.seq == 2
        other.rewind(rt.session_id, 1)  # the whole exchange, then the same content again
        again = other.append_messages(rt.session_id, [user("one"), answer(1)]).appended[-1]
        assert again.identity == last.identity and again.seq == 4
        history += [answer(1), user("two")]
        reads = counting.view_tips
        prepared = prep(rt, history)
        assert counting.view_tips == reads + 1
        assert prepared.messages == fresh(rt, mine)
        rt.record(answer(2))
        assert rt.last_reply == (rt.session_id, again.seq + 2)
        assert rt.recent_rows(REVIEW_WINDOW) == review_rows(mine, rt.session_id)
    finally:
        engine.close()


# -- (ii) recent_rows: the review window from the confirmed view ------------------------------
def test_recent_rows_match_the_stored_window(eng: Engine, store: Store) -> None:
    rt = eng.open_session(new=True)
    history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, user("hello")]
    for turn in range(30):  # crosses 40 rows
        rt.prepare_history(history)
        assert rt.recent_rows(REVIEW_WINDOW) is None  # nothing recorded in this turn yet
        rt.record(answer(turn))
        got = rt.recent_rows(REVIEW_WINDOW)
        assert got is not None
        assert got == review_rows(store, rt.session_id)
        assert len(got) == min(REVIEW_WINDOW, 2 * turn + 2)
        assert got[-1] == answer(turn)
        history += [answer(turn), user(f"next {turn}")]
    assert rt.recent_rows(5) == review_rows(store, rt.session_id)[-5:]


def test_recent_rows_are_copies(eng: Engine, store: Store) -> None:
    rt = eng.open_session(new=True)
    rt.prepare([user("hello")], system_prompt=SYSTEM)
    rt.record(answer(0))
    got = rt.recent_rows(REVIEW_WINDOW)
    assert got is not None
    got[-1]["content"] = "edited by a reviewer"
    assert rt.recent_rows(REVIEW_WINDOW) == review_rows(store, rt.session_id)


def test_recent_rows_with_a_checkpoint(eng: Engine, store: Store) -> None:
    rt = eng.open_session(new=True)
    history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    for turn in range(25):
        history.append(user(f"q{turn}"))
        rt.prepare_history(history)
        rt.record(answer(turn))
        history.append(answer(turn))
    # hides 8 of 50 rows: the view keeps more than the review window
    store.add_checkpoint(rt.session_id, CheckpointDraft("summary", 1, 8, 9))
    history.append(user("q25"))
    rt.prepare_history(history)
    rt.record(answer(25))
    history.append(answer(25))
    got = rt.recent_rows(REVIEW_WINDOW)
    assert got is not None and len(got) == REVIEW_WINDOW
    assert got == review_rows(store, rt.session_id)
    # hides all but the last few rows: the view cannot answer for 40 rows
    store.add_checkpoint(rt.session_id, CheckpointDraft("summary 2", 1, 48, 49))
    history.append(user("q26"))
    rt.prepare_history(history)
    rt.record(answer(26))
    assert rt.recent_rows(REVIEW_WINDOW) is None
    assert len(review_rows(store, rt.session_id)) == REVIEW_WINDOW  # the store still can
    assert rt.recent_rows(4) == review_rows(store, rt.session_id)[-4:]


@pytest.mark.parametrize("hide", [False, True])
def test_the_review_gets_the_stored_window(store: Store, hide: bool) -> None:
    """Through the engine: what memory review receives equals the stored window, whether it
    came from the view or (checkpoint hides rows) from the store."""
    recorder = ReviewRecorder()
    engine = make_engine(CountingStore(store), memory=recorder)
    try:
        rt = engine.open_session(new=True)
        history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
        for turn in range(8):
            history.append(user(f"q{turn}"))
            rt.prepare_history(history)
            rt.record(answer(turn))
            history.append(answer(turn))
            assert recorder.turns[-1] == review_rows(store, rt.session_id)
        if hide:
            store.add_checkpoint(rt.session_id, CheckpointDraft("summary", 1, 10, 11))
        history.append(user("q8"))
        rt.prepare_history(history)
        rt.record(answer(8))
        assert (rt.recent_rows(REVIEW_WINDOW) is None) == hide
        assert len(recorder.turns) == 9
        assert recorder.turns[-1] == review_rows(store, rt.session_id)
        assert len(recorder.turns[-1]) == 18
    finally:
        engine.close()


# -- (iii) usage in the reply's append -----------------------------------------------------------
def test_recorded_usage_reaches_the_session_totals(eng: Engine, counting: CountingStore,
                                                   store: Store) -> None:
    rt = eng.open_session(new=True)
    history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, user("hello")]
    rt.prepare_history(history)  # full path
    rt.record(answer(0), usage={"prompt_tokens": 100, "completion_tokens": 20,
                                "prompt_tokens_details": {"cached_tokens": 64}}, model="m-1")
    history += [answer(0), user("more")]
    rt.prepare_history(history)  # fast path
    rt.record(answer(1), usage={"prompt_tokens": 130, "completion_tokens": 7})
    rt.prepare([user("library")])
    rt.record(answer(2), usage={"prompt_tokens": 1, "completion_tokens": 0}, model="m-2")
    rt.prepare([user("no usage")])
    rt.record(answer(3))  # nothing to add
    rt.prepare([user("zero usage")])
    rt.record(answer(4), usage={"prompt_tokens": 0, "completion_tokens": 0}, model="m-3")
    s = store.get_session(rt.session_id)
    assert (s.input_tokens, s.output_tokens, s.cache_read_tokens) == (231, 27, 64)
    assert s.model == "m-2"  # a record without tokens does not move the model either
    assert counting.add_usages == 0  # moved in the reply's own append
    assert [m.message["content"] for m in store.get_messages(rt.session_id)][-1] == \
        answer(4)["content"]


def test_usage_is_kept_when_another_writer_forces_the_slow_append(
        shared: tuple[SQLiteStore, SQLiteStore]) -> None:
    mine, other = shared
    engine = make_engine(mine)
    try:
        rt = engine.open_session(new=True)
        rt.prepare_history([{"role": "system", "content": SYSTEM}, user("one")])
        other.append_messages(rt.session_id, [user("sneaked in")])  # the reply's tip is stale
        rt.record(answer(1), usage={"prompt_tokens": 40, "completion_tokens": 4}, model="m")
        s = mine.get_session(rt.session_id)
        assert (s.input_tokens, s.output_tokens, s.model) == (40, 4, "m")
        assert [m.message["content"] for m in mine.get_messages(rt.session_id)] == [
            "one", answer(1)["content"]]  # after its question; "sneaked in" rewound
    finally:
        engine.close()


def test_a_light_record_whose_review_must_read_a_busy_store_hands_it_to_a_thread(
        tmp_path: Path) -> None:
    """Light mode never waits: when the review window must come from the store (a checkpoint
    hides rows) and every reader is taken, the after-turn work runs in a thread once one frees
    up — the review still gets the right rows, the reply is stored once."""
    from refold.store.sqlite.database import MAX_READERS

    store = SQLiteStore(str(tmp_path / "light.db"), synchronous="NORMAL")
    recorder = ReviewRecorder()
    engine = make_engine(store, memory=recorder)
    try:
        rt = engine.open_session(new=True)
        history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
        for turn in range(3):
            history.append(user(f"q{turn}"))
            rt.prepare_history(history)
            rt.record(answer(turn))
            history.append(answer(turn))
        store.add_checkpoint(rt.session_id, CheckpointDraft("summary", 1, 4, 5))
        history.append(user("q3"))
        rt.prepare_history(history)  # re-reads the view after the checkpoint
        rt.record(answer(3))
        history += [answer(3), user("q4")]
        assert rt.inline.prepare(history) is not None
        taken, release = threading.Event(), threading.Event()
        holders = []

        def hold() -> None:
            with store.db.read():
                taken.set()
                release.wait(10)

        for _ in range(MAX_READERS):
            taken.clear()
            holder = threading.Thread(target=hold)
            holder.start()
            holders.append(holder)
            assert taken.wait(5)
        seen = len(recorder.turns)
        assert rt.inline.record(answer(4)) is True  # stored without waiting
        assert len(recorder.turns) == seen  # the review had to wait: not done on this thread
        release.set()
        for holder in holders:
            holder.join(5)
        deadline = time.monotonic() + 10
        while len(recorder.turns) == seen and time.monotonic() < deadline:
            time.sleep(0.01)
        assert recorder.turns[-1] == review_rows(store, rt.session_id)
        assert [m["content"] for m in review_rows(store, rt.session_id)].count(
            answer(4)["content"]) == 1
    finally:
        engine.close()
        store.close()
