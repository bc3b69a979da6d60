"""Pruning by lineage: old sessions go only as whole lineages, never from under a live one.

A *lineage* is every session connected by parent links (compaction continuations, forks,
branches). Deleting one member of a live lineage would cut history its descendants still stand
on — after two ``--rotate`` compactions the originals have *ended* (by rotation) while their
child carries on — so ``prune`` never looks at sessions one by one. A lineage is prunable when
every member has ended and its newest activity (a start, an end or a stored message) is older
than the cutoff. ``prunable_lineages`` is the plan a command shows before asking; ``prune``
deletes a plan, re-checking each lineage's activity first so a session written to after the
plan was shown is kept.

Backend-agnostic: only ``Store`` methods are used, so both backends prune the same way.
"""

from __future__ import annotations

import time

from refold._records import dataclass
from refold.errors import InvalidInput, NotFound
from refold.store.base import Session, Store

ALL_SESSIONS = 1 << 62


@dataclass(frozen=True)
class Lineage:
    """Sessions connected by parent links, oldest first, and their newest activity."""

    sessions: tuple[Session, ...]
    last_activity: float
    live: bool  # some member has not ended

    @property
    def message_count(self) -> int:
        return sum(s.message_count for s in self.sessions)


def _activity(store: Store, session: Session) -> float:
    last = store.last_message(session.id)
    times = [session.started_at, session.ended_at or 0.0, last.created_at if last else 0.0]
    return max(times)


def _components(sessions: list[Session]) -> list[list[Session]]:
    by_id = {s.id: s for s in sessions}
    root: dict[str, str] = {}

    def find(sid: str) -> str:
        while root.get(sid, sid) != sid:
            sid = root[sid]
        return sid

    for session in sessions:
        parent = session.parent_session_id
        if parent in by_id:
            root[find(session.id)] = find(parent)
    groups: dict[str, list[Session]] = {}
    for session in sessions:
        groups.setdefault(find(session.id), []).append(session)
    return [sorted(g, key=lambda s: s.started_at) for g in groups.values()]


def lineages(store: Store) -> list[Lineage]:
    """Every lineage in the store, oldest activity first."""
    found = []
    for group in _components(store.list_sessions(limit=ALL_SESSIONS)):
        found.append(Lineage(tuple(group), max(_activity(store, s) for s in group),
                             any(s.ended_at is None for s in group)))
    return sorted(found, key=lambda lin: lin.last_activity)


def prunable_lineages(store: Store, older_than_days: float, *,
                      now: float | None = None) -> list[Lineage]:
    """The lineages ``prune`` would delete: all members ended, newest activity before the
    cutoff."""
    if older_than_days < 0:
        raise InvalidInput("older_than_days cannot be negative")
    cutoff = (time.time() if now is None else now) - older_than_days * 86400
    return [lin for lin in lineages(store) if not lin.live and lin.last_activity < cutoff]


def prune(store: Store, plan: list[Lineage]) -> int:
    """Delete the planned lineages (newest member first); returns how many sessions went.
    A lineage that changed since the plan (new activity, a member gone or still running) is
    kept whole."""
    deleted = 0
    for lineage in plan:
        try:
            current = [store.get_session(s.id) for s in lineage.sessions]
        except NotFound:
            continue
        if _changed(store, lineage, current):
            continue
        for session in reversed(current):
            store.delete_session(session.id)
            deleted += 1
    return deleted


def _changed(store: Store, lineage: Lineage, current: list[Session]) -> bool:
    ids = {s.id for s in current}
    if any(c.id not in ids for s in current for c in store.children(s.id)):
        return True  # a new continuation, fork or branch joined the lineage
    if any(s.ended_at is None for s in current):
        return True
    return max(_activity(store, s) for s in current) > lineage.last_activity


def prune_older_than(store: Store, older_than_days: float) -> int:
    """``prune(store, prunable_lineages(store, older_than_days))``."""
    return prune(store, prunable_lineages(store, older_than_days))
