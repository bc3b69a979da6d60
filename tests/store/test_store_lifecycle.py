"""Pruning by whole lineages (issue 14): never the originals of a live lineage, on both
backends."""

from __future__ import annotations

import time

from refold.store import Session, Store
from refold.store.lifecycle import prunable_lineages, prune


def _rotated_lineage(store: Store, *, end_last: bool) -> list[Session]:
    """``lin`` → ``lin #2`` → ``lin #3`` as two ``--rotate`` compactions leave them."""
    chain: list[Session] = []
    parent: str | None = None
    for n, title in enumerate(["lin", "lin #2", "lin #3"]):
        session = store.create_session(title=title, parent_session_id=parent,
                                       link_kind="compaction" if parent else None)
        store.append_messages(session.id, [{"role": "user", "content": f"turn {n}"}])
        if n < 2 or end_last:
            store.end_session(session.id, "rotation" if n < 2 else "done")
        chain.append(session)
        parent = session.id
    return chain


def _exists(store: Store, session_id: str) -> bool:
    return any(s.id == session_id for s in store.list_sessions(limit=1000))


def test_prune_keeps_the_originals_of_a_live_lineage(store: Store) -> None:
    chain = _rotated_lineage(store, end_last=False)
    time.sleep(0.01)
    assert store.prune_sessions(0) == 0
    assert all(_exists(store, s.id) for s in chain)
    assert store.get_session(chain[2].id).parent_session_id == chain[1].id


def test_prune_takes_an_ended_lineage_whole(store: Store) -> None:
    chain = _rotated_lineage(store, end_last=True)
    other = store.create_session(title="running")
    time.sleep(0.01)
    plan = prunable_lineages(store, 0)
    assert [[s.id for s in lin.sessions] for lin in plan] == [[s.id for s in chain]]
    assert plan[0].message_count == 3
    assert store.prune_sessions(0) == 3
    assert not any(_exists(store, s.id) for s in chain) and _exists(store, other.id)


def test_prune_goes_by_the_newest_activity_of_the_lineage(store: Store) -> None:
    _rotated_lineage(store, end_last=True)
    future = time.time() + 86400
    assert prunable_lineages(store, 0.5, now=future)  # a day later, half a day old: prunable
    assert not prunable_lineages(store, 2, now=future)  # not two days old


def test_a_lineage_written_to_after_the_plan_is_kept(store: Store) -> None:
    chain = _rotated_lineage(store, end_last=True)
    time.sleep(0.01)
    plan = prunable_lineages(store, 0)
    store.fork_session(chain[0].id, kind="branch", title="a new branch")
    assert prune(store, plan) == 0
    assert all(_exists(store, s.id) for s in chain)
