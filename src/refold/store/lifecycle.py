"""Pruning by lineage: old sessions go only as whole lineages, never from under a live one.

A *lineage* is every session connected by parent links (compaction continuations, forks,
branches). Deleting one member of a live lineage would cut history its descendants still stand
on — after two ``--rotate`` compactions the originals have *ended* (by rotation) while their
child carries on — so ``prune`` never looks at sessions one by one. A session's *activity* is
its newest start, end or stored message. A lineage is prunable when its newest activity is
older than the cutoff and none of its sessions is live. A session idle for longer than the
cutoff counts as ended whether or not anything ended it (a proxy conversation, an import, a
chat whose process died never end otherwise); one that has not ended (or was written to after
it ended: resumed) and was active within the last ``IN_USE_SECONDS`` is live whatever the
cutoff, so ``--older-than 0`` spares a conversation in use. ``plan_prune`` is the plan a command
shows before asking — what goes, and the old lineages kept as live with why; ``prune``
deletes a plan, re-checking each lineage's activity first so a session written to after the
plan was shown is kept.

Backend-agnostic: only ``Store`` methods are used, so both backends prune the same way.
"""

from __future__ import annotations

import time

from refold._records import dataclass, field
from refold.errors import InvalidInput, NotFound
from refold.store.base import Session, Store

ALL_SESSIONS = 1 << 62
IN_USE_SECONDS = 3600.0  # an open session active this recently is live, whatever the cutoff
KEPT_RECENT = "recent"  # a session of the lineage was active within the cutoff
KEPT_IN_USE = "in use"  # a session of the lineage is open and active within IN_USE_SECONDS


@dataclass(frozen=True)
class Lineage:
    """Sessions connected by parent links, oldest first, and their newest activity."""

    sessions: tuple[Session, ...]
    last_activity: float
    live: bool  # some member has not ended (or was written to after it ended)
    # each member's own newest activity, in the order of ``sessions``
    activity: tuple[float, ...] = ()
    # when the newest open member (not ended, or written to after its end) was active
    open_activity: float | None = None

    @property
    def message_count(self) -> int:
        return sum(s.message_count for s in self.sessions)


@dataclass(frozen=True)
class PrunePlan:
    """What ``prune`` would delete, and the old lineages it keeps as live."""

    cutoff: float  # activity before this is old
    delete: list[Lineage] = field(default_factory=list)
    # lineages with a session older than the cutoff, kept whole: (lineage, KEPT_RECENT or
    # KEPT_IN_USE)
    kept: list[tuple[Lineage, str]] = field(default_factory=list)


def _activity(store: Store, session: Session) -> float:
    last = store.last_message(session.id)
    times = [session.started_at, session.ended_at or 0.0, last.created_at if last else 0.0]
    return max(times)


def _open(session: Session, activity: float) -> bool:
    """Not ended, or written to after it ended (a chat session resumed later)."""
    return session.ended_at is None or activity > session.ended_at


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


def _lineage(store: Store, group: list[Session]) -> Lineage:
    activity = tuple(_activity(store, s) for s in group)
    opened = [a for s, a in zip(group, activity, strict=True) if _open(s, a)]
    return Lineage(tuple(group), max(activity), bool(opened), activity,
                   max(opened) if opened else None)


def lineages(store: Store) -> list[Lineage]:
    """Every lineage in the store, oldest activity first."""
    found = [_lineage(store, group)
             for group in _components(store.list_sessions(limit=ALL_SESSIONS))]
    return sorted(found, key=lambda lin: lin.last_activity)


def plan_prune(store: Store, older_than_days: float, *, now: float | None = None) -> PrunePlan:
    """The lineages whose newest activity is older than ``older_than_days`` and none of whose
    sessions is in use (``IN_USE_SECONDS``), and the lineages with an older session kept as
    live (why: ``KEPT_RECENT``, ``KEPT_IN_USE``)."""
    if older_than_days < 0:
        raise InvalidInput("older_than_days cannot be negative")
    now = time.time() if now is None else now
    plan = PrunePlan(cutoff=now - older_than_days * 86400)
    for lineage in lineages(store):
        if min(lineage.activity) >= plan.cutoff:
            continue  # nothing in it is old
        if lineage.last_activity >= plan.cutoff:
            plan.kept.append((lineage, KEPT_RECENT))
        elif lineage.open_activity is not None and lineage.open_activity >= now - IN_USE_SECONDS:
            plan.kept.append((lineage, KEPT_IN_USE))
        else:
            plan.delete.append(lineage)
    return plan


def prunable_lineages(store: Store, older_than_days: float, *,
                      now: float | None = None) -> list[Lineage]:
    """The lineages ``prune`` would delete (``plan_prune(…).delete``)."""
    return plan_prune(store, older_than_days, now=now).delete


def prune_lineages(store: Store, plan: list[Lineage]) -> list[Lineage]:
    """Delete the planned lineages (newest member first); returns those deleted. A lineage
    that changed since the plan (new activity, a member gone, a new continuation, fork or
    branch) is kept whole."""
    deleted = []
    for lineage in plan:
        try:
            current = [store.get_session(s.id) for s in lineage.sessions]
        except NotFound:
            continue
        if _changed(store, lineage, current):
            continue
        for session in reversed(current):
            store.delete_session(session.id)
        deleted.append(lineage)
    return deleted


def prune(store: Store, plan: list[Lineage]) -> int:
    """``prune_lineages``; returns how many sessions went."""
    return sum(len(lin.sessions) for lin in prune_lineages(store, plan))


def _changed(store: Store, lineage: Lineage, current: list[Session]) -> bool:
    ids = {s.id for s in current}
    if any(c.id not in ids for s in current for c in store.children(s.id)):
        return True  # a new continuation, fork or branch joined the lineage
    now = _lineage(store, current)
    if now.open_activity is not None and now.open_activity >= time.time() - IN_USE_SECONDS:
        return True  # in use now
    return now.last_activity > lineage.last_activity


def prune_older_than(store: Store, older_than_days: float) -> int:
    """``prune(store, prunable_lineages(store, older_than_days))``."""
    return prune(store, prunable_lineages(store, older_than_days))
