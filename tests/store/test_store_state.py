"""Conformance: checkpoints and projection, events, leases, DB-backed memory (every backend)."""

from __future__ import annotations

import pytest

from refold.errors import Conflict, InvalidInput, NotFound
from refold.store import CheckpointDraft, MemoryRow, Store
from refold.store.base import ViewTip


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def test_checkpoint_round_trip(store: Store) -> None:
    s = store.create_session()
    store.append_messages(s.id, [user(str(i)) for i in range(6)])
    draft = CheckpointDraft(summary="summary 一", first_seq=1, last_seq=3, tail_start_seq=4,
                            anchors=["/etc/hosts", "ERR_42"], tokens_before=900,
                            tokens_after=120, summarizer="llm", status="fallback",
                            summary_role="assistant", details={"k": [1, 2]})
    made = store.add_checkpoint(s.id, draft)
    assert made.id > 0 and made.session_id == s.id and made.created_at > 0
    assert (made.summary, made.first_seq, made.last_seq, made.tail_start_seq) == (
        "summary 一", 1, 3, 4)
    assert made.anchors == ["/etc/hosts", "ERR_42"] and made.details == {"k": [1, 2]}
    assert (made.summarizer, made.status, made.summary_role) == ("llm", "fallback", "assistant")
    assert (made.tokens_before, made.tokens_after) == (900, 120)
    assert store.latest_checkpoint(s.id) == made
    assert store.list_checkpoints(s.id) == [made]


def test_checkpoint_range_is_validated(store: Store) -> None:
    s = store.create_session()
    for first, last, tail in ((0, 1, 2), (3, 2, 4), (1, 3, 3)):
        with pytest.raises(InvalidInput):
            store.add_checkpoint(s.id, CheckpointDraft("x", first, last, tail))
    with pytest.raises(NotFound):
        store.add_checkpoint("ghost", CheckpointDraft("x", 1, 1, 2))
    assert store.list_checkpoints(s.id) == []


def test_projection_without_checkpoint_is_all_active(store: Store) -> None:
    s = store.create_session()
    store.append_messages(s.id, [user("a"), user("b"), user("c")])
    store.rewind(s.id, 3)
    view = store.projection(s.id)
    assert view.checkpoint is None and view.session_id == s.id
    assert [m.message["content"] for m in view.messages] == ["a", "b"]


def test_projection_uses_latest_checkpoint_tail(store: Store) -> None:
    s = store.create_session()
    store.append_messages(s.id, [user(str(i)) for i in range(1, 11)])
    store.add_checkpoint(s.id, CheckpointDraft("first", 1, 4, 5))
    second = store.add_checkpoint(s.id, CheckpointDraft("second", 1, 7, 8))
    view = store.projection(s.id)
    assert view.checkpoint == second
    assert [m.seq for m in view.messages] == [8, 9, 10]
    # the ledger keeps everything: compaction never deletes
    assert len(store.get_messages(s.id)) == 10
    store.append_messages(s.id, [user("11")])
    assert [m.seq for m in store.projection(s.id).messages] == [8, 9, 10, 11]


def test_projection_excludes_rewound_tail_rows(store: Store) -> None:
    s = store.create_session()
    store.append_messages(s.id, [user(str(i)) for i in range(1, 6)])
    store.add_checkpoint(s.id, CheckpointDraft("sum", 1, 2, 3))
    store.rewind(s.id, 4)
    assert [m.seq for m in store.projection(s.id).messages] == [3]


def test_projection_of_missing_session(store: Store) -> None:
    with pytest.raises(NotFound):
        store.projection("ghost")


def test_view_tip_follows_appends_rewinds_and_checkpoints(store: Store) -> None:
    s = store.create_session()
    assert store.view_tip(s.id) == ViewTip(None, None, None)
    rows = store.append_messages(s.id, [user(str(i)) for i in range(4)]).appended
    assert store.view_tip(s.id) == ViewTip(4, rows[-1].identity, None)
    made = store.add_checkpoint(s.id, CheckpointDraft("sum", 1, 1, 2))
    assert store.view_tip(s.id) == ViewTip(4, rows[-1].identity, made.id)
    store.rewind(s.id, 3)  # rows 3 and 4 go inactive: the tip is row 2 again
    assert store.view_tip(s.id) == ViewTip(2, rows[1].identity, made.id)
    again = store.append_messages(s.id, [user("2"), user("3")]).appended
    # the same content re-appended: same identity as before the rewind, but a new seq
    assert again[-1].identity == rows[-1].identity
    assert store.view_tip(s.id) == ViewTip(6, rows[-1].identity, made.id)
    newer = store.add_checkpoint(s.id, CheckpointDraft("sum 2", 1, 2, 5))
    assert store.view_tip(s.id).checkpoint_id == newer.id != made.id
    with pytest.raises(NotFound):
        store.view_tip("ghost")


def test_events_append_and_filter(store: Store) -> None:
    s = store.create_session()
    goal = store.append_event(s.id, "goal", {"text": "ship 🚀"})
    todo = store.append_event(s.id, "todo", {"items": [{"id": 1, "done": False}]})
    store.append_event(s.id, "todo", {"items": []})
    assert goal.id < todo.id and goal.payload == {"text": "ship 🚀"}
    assert [e.kind for e in store.list_events(s.id)] == ["goal", "todo", "todo"]
    assert [e.payload for e in store.list_events(s.id, "todo")] == [
        {"items": [{"id": 1, "done": False}]}, {"items": []}]
    with pytest.raises(NotFound):
        store.append_event("ghost", "goal", {})
    with pytest.raises(InvalidInput):
        store.append_event(s.id, "", {})
    # only the events stored after one (a reader that keeps what it read asks for the rest)
    assert [e.payload for e in store.list_events(s.id, after_id=goal.id)] == [
        {"items": [{"id": 1, "done": False}]}, {"items": []}]
    assert [e.payload for e in store.list_events(s.id, "todo", after_id=todo.id)] == [
        {"items": []}]
    assert store.list_events(s.id, "goal", after_id=goal.id) == []


def test_leases_are_exclusive_until_released_or_expired(store: Store) -> None:
    assert store.acquire_lease("compact:s1", "a", 60)
    assert not store.acquire_lease("compact:s1", "b", 60)
    assert store.acquire_lease("compact:s1", "a", 60)  # re-entrant: extends
    store.release_lease("compact:s1", "b")  # not the holder: no effect
    assert not store.acquire_lease("compact:s1", "b", 60)
    store.release_lease("compact:s1", "a")
    assert store.acquire_lease("compact:s1", "b", 0.001)
    assert store.acquire_lease("other", "a", 60)  # names are independent
    import time

    time.sleep(0.01)
    assert store.acquire_lease("compact:s1", "a", 60)  # b's lease expired
    with pytest.raises(InvalidInput):
        store.acquire_lease("x", "a", 0)


def test_memory_compare_and_swap(store: Store) -> None:
    assert store.memory_load("default", "memory") == ([], 0)
    rows = [MemoryRow("uses 中文", 1.0, 2.0), MemoryRow("likes tea", 3.0, 3.0)]
    version = store.memory_save("default", "memory", rows, expected_version=0)
    assert version == 1
    assert store.memory_load("default", "memory") == (rows, 1)
    with pytest.raises(Conflict):
        store.memory_save("default", "memory", [], expected_version=0)
    assert store.memory_load("default", "memory") == (rows, 1)
    assert store.memory_save("default", "memory", rows[:1], expected_version=1) == 2
    assert store.memory_load("default", "user") == ([], 0)
    assert store.memory_load("other", "memory") == ([], 0)
