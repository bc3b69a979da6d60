"""``add_checkpoint(..., expect=CheckpointBase)`` on both backends: a compare-and-set inside the
insert's transaction. A stale base (a checkpoint landed since, or the planned-from tip was
rewound) is refused and writes nothing; a checkpoint never moves the view backwards; of two
writers racing from the same base exactly one lands.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from refold.errors import Conflict
from refold.store import Store
from refold.store.base import CheckpointBase, CheckpointDraft


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def reply(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def conversation(store: Store, turns: int) -> str:
    session = store.create_session()
    messages: list[dict[str, Any]] = []
    for i in range(turns):
        messages += [user(f"question {i}"), reply(f"answer {i}")]
    store.append_messages(session.id, messages)
    return session.id


def draft(store: Store, session_id: str, last_seq: int, summary: str = "summary") -> \
        CheckpointDraft:
    rows = store.get_messages(session_id)
    first = rows[0].seq
    tail = next(r.seq for r in rows if r.seq > last_seq)
    return CheckpointDraft(summary=summary, first_seq=first, last_seq=last_seq,
                           tail_start_seq=tail, tokens_before=100, tokens_after=10)


def seqs(store: Store, session_id: str) -> list[int]:
    return [r.seq for r in store.get_messages(session_id)]


def test_a_base_taken_from_the_projection_lands_and_then_is_stale(store: Store) -> None:
    sid = conversation(store, 4)
    base = CheckpointBase.of(store.projection(sid))
    assert base.checkpoint_id is None
    first = store.add_checkpoint(sid, draft(store, sid, seqs(store, sid)[1]), expect=base)
    assert store.latest_checkpoint(sid) == first
    # a second plan from the same (now old) view: refused, nothing written
    with pytest.raises(Conflict) as refused:
        store.add_checkpoint(sid, draft(store, sid, seqs(store, sid)[3], "second"), expect=base)
    assert refused.value.details.get("reason") == "stale"
    assert [c.id for c in store.list_checkpoints(sid)] == [first.id]
    # planned again from the current view, it lands
    fresh = CheckpointBase.of(store.projection(sid))
    assert fresh.checkpoint_id == first.id
    second = store.add_checkpoint(sid, draft(store, sid, seqs(store, sid)[3], "second"),
                                  expect=fresh)
    assert [c.id for c in store.list_checkpoints(sid)] == [first.id, second.id]
    assert store.projection(sid).checkpoint == second


def test_rows_appended_after_the_base_only_extend_the_tail(store: Store) -> None:
    sid = conversation(store, 3)
    base = CheckpointBase.of(store.projection(sid))
    store.append_messages(sid, [user("one more"), reply("sure")])
    landed = store.add_checkpoint(sid, draft(store, sid, seqs(store, sid)[1]), expect=base)
    projection = store.projection(sid)
    assert projection.checkpoint == landed
    assert [m.message["content"] for m in projection.messages][-2:] == ["one more", "sure"]


def test_a_rewound_tip_makes_the_base_stale(store: Store) -> None:
    sid = conversation(store, 3)
    base = CheckpointBase.of(store.projection(sid))
    last_user = [r for r in store.get_messages(sid) if r.role == "user"][-1]
    store.rewind(sid, last_user.seq)
    with pytest.raises(Conflict) as refused:
        store.add_checkpoint(sid, draft(store, sid, seqs(store, sid)[1]), expect=base)
    assert refused.value.details.get("reason") == "stale"
    assert store.list_checkpoints(sid) == []


def test_checkpoints_only_move_the_view_forward(store: Store) -> None:
    sid = conversation(store, 4)
    rows = seqs(store, sid)
    far = store.add_checkpoint(sid, draft(store, sid, rows[5]),
                               expect=CheckpointBase.of(store.projection(sid)))
    current = CheckpointBase.of(store.projection(sid))
    for last in (rows[1], rows[5]):  # behind the latest, and level with it
        with pytest.raises(Conflict) as refused:
            store.add_checkpoint(sid, draft(store, sid, last, "backwards"), expect=current)
        assert refused.value.details.get("reason") == "backwards"
        with pytest.raises(Conflict):  # without expect too
            store.add_checkpoint(sid, draft(store, sid, last, "backwards"))
    assert store.list_checkpoints(sid) == [far]


def _second_store(store: Store, tmp_path: Path) -> Store:
    """Another connection to the same data (another process would have its own)."""
    from refold.store.sqlite import SQLiteStore

    if isinstance(store, SQLiteStore):
        return SQLiteStore(str(tmp_path / "refold.db"))
    from refold.store.postgres import PostgresStore

    return PostgresStore(store.url, schema=store.schema)  # type: ignore[attr-defined]


ROUNDS = 20


def race(first: Store, second: Store, sid: str, cuts: tuple[int, int]) -> list[str]:
    """Both stores commit a plan from the same base at once; what each saw."""
    base = CheckpointBase.of(first.projection(sid))
    barrier = threading.Barrier(2)
    outcomes: list[str] = []
    lock = threading.Lock()

    def writer(target: Store, last: int, name: str) -> Callable[[], None]:
        def run() -> None:
            planned = draft(target, sid, last, name)
            barrier.wait(10)
            try:
                target.add_checkpoint(sid, planned, expect=base)
                result = f"won:{name}"
            except Conflict:
                result = "refused"
            with lock:
                outcomes.append(result)
        return run

    threads = [threading.Thread(target=writer(first, cuts[0], "a")),
               threading.Thread(target=writer(second, cuts[1], "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return outcomes


def test_two_writers_from_one_base_exactly_one_wins(store: Store, tmp_path: Path) -> None:
    other = _second_store(store, tmp_path)
    try:
        for round_ in range(ROUNDS):
            sid = conversation(store, 4)
            rows = seqs(store, sid)
            # different cuts (swapped every round), so a lost update shows as two checkpoints
            cuts = (rows[3], rows[5]) if round_ % 2 else (rows[5], rows[3])
            outcomes = race(store, other, sid, cuts)
            assert len(outcomes) == 2 and "refused" in outcomes, outcomes
            (winner,) = [o for o in outcomes if o.startswith("won:")]
            (checkpoint,) = store.list_checkpoints(sid)
            assert checkpoint.summary == winner.removeprefix("won:")
    finally:
        other.close()
