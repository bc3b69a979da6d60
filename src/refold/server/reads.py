"""Read endpoints under ``/v1/refold/``: sessions, one session's messages, search, memory.

Every read is scoped to the caller's tenant: the store is always asked with ``owner=tenant``, and
a record that comes back with another owner is treated as missing (defense in depth), so one
key can neither list nor open nor find another key's sessions. Store calls run in worker threads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio.to_thread

from refold import _records as records
from refold.errors import InvalidInput, NotFound
from refold.server.sessions import SessionPool
from refold.store.base import (
    SearchHit,
    SearchQuery,
    Session,
    SortOrder,
    Store,
    StoredMessage,
)

MAX_LIMIT = 500


def session_json(session: Session) -> dict[str, Any]:
    return records.asdict(session)


def message_json(row: StoredMessage) -> dict[str, Any]:
    return {"seq": row.seq, "message": row.message, "created_at": row.created_at,
            "active": row.active, "token_count": row.token_count}


def hit_json(hit: SearchHit) -> dict[str, Any]:
    return {"session_id": hit.session_id, "session_title": hit.session_title, "seq": hit.seq,
            "role": hit.role, "snippet": hit.snippet, "created_at": hit.created_at,
            "score": hit.score, "lineage": list(hit.lineage), "by_meaning": hit.by_meaning,
            "window": [message_json(m) for m in hit.window]}


def parse_limit(raw: str | None, default: int) -> int:
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise InvalidInput(f"limit must be an integer, got {raw!r}") from exc
    if not 1 <= value <= MAX_LIMIT:
        raise InvalidInput(f"limit must be between 1 and {MAX_LIMIT}, got {value}")
    return value


def _owned(store: Store, ref: str, owner: str) -> Session:
    session = store.resolve_session(ref, owner=owner)
    if session.owner != owner:
        raise NotFound(f"no session matches {ref!r}")
    return session


async def list_sessions(store: Store, owner: str, limit: int) -> dict[str, Any]:
    sessions = await anyio.to_thread.run_sync(
        lambda: store.list_sessions(limit=limit, owner=owner))
    return {"object": "list", "data": [session_json(s) for s in sessions if s.owner == owner]}


async def get_session(store: Store, owner: str, ref: str, limit: int | None,
                      include_inactive: bool) -> dict[str, Any]:
    def read() -> dict[str, Any]:
        session = _owned(store, ref, owner)
        rows = store.get_messages(session.id, include_inactive=include_inactive, limit=limit)
        return dict(session_json(session), messages=[message_json(r) for r in rows])

    return await anyio.to_thread.run_sync(read)


SEARCH_ROLES = ("user", "assistant", "tool", "system", "developer")
MAX_WINDOW = 10


async def search(store: Store, owner: str, text: str, limit: int,
                 mode: str | None = None, params: Mapping[str, str] | None = None
                 ) -> dict[str, Any]:
    """``mode``: fts, vector or hybrid (default: hybrid once the archive is indexed).
    ``params``, as ``refold search`` takes them: ``session`` (an id or exact name of the
    caller's), ``role``, ``source``, ``since`` / ``until`` (a date or an age: 7d, 12h),
    ``sort`` (relevance or recency), ``window`` (0-10 messages each side), ``all`` (1: rewound
    messages too)."""
    from refold.search.dates import parse_when
    from refold.search.vectors import hybrid_search, resolve_mode

    if not text.strip():
        raise InvalidInput("search needs a query: ?q=...")
    try:
        chosen = resolve_mode(store, mode)
    except ValueError as exc:
        raise InvalidInput(str(exc)) from None
    params = params or {}
    role = params.get("role") or None
    if role is not None and role not in SEARCH_ROLES:
        raise InvalidInput(f"role must be one of {', '.join(SEARCH_ROLES)}, got {role!r}")
    asked = params.get("sort") or "relevance"
    if asked not in ("relevance", "recency"):
        raise InvalidInput(f"sort must be relevance or recency, got {asked!r}")
    sort: SortOrder = "recency" if asked == "recency" else "relevance"
    window = _bounded_int(params.get("window"), "window", 1, 0, MAX_WINDOW)
    try:
        since, until = parse_when(params.get("since") or None), \
            parse_when(params.get("until") or None)
    except ValueError as exc:
        raise InvalidInput(f"since/until: {exc}") from None
    include = (params.get("all") or "").lower() in ("1", "true", "yes")

    def run() -> list[SearchHit]:
        ref = params.get("session") or None
        session_id = _owned(store, ref, owner).id if ref is not None else None
        query = SearchQuery(text=text, owner=owner, limit=limit, session_id=session_id,
                            role=role, source=params.get("source") or None, since=since,
                            until=until, include_inactive=include, sort=sort, window=window)
        return hybrid_search(store, query, mode=chosen)

    hits = await anyio.to_thread.run_sync(run)
    return {"object": "list", "query": text, "data": [hit_json(h) for h in hits]}


def _bounded_int(raw: str | None, name: str, default: int, low: int, high: int) -> int:
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidInput(f"{name} must be an integer, got {raw!r}") from None
    if not low <= value <= high:
        raise InvalidInput(f"{name} must be between {low} and {high}, got {value}")
    return value


async def memory(pool: SessionPool, owner: str) -> dict[str, Any]:
    """The tenant's memory entries (live state, not a session's frozen snapshot)."""
    engine = await pool.engine(owner)
    manager = getattr(engine, "memory", None)
    if manager is None:
        return {"object": "memory", "targets": {}}
    return {"object": "memory", "targets": await anyio.to_thread.run_sync(_memory_state, manager)}


def _memory_state(manager: Any) -> dict[str, Any]:
    store = getattr(manager, "store", None)
    if store is None:
        return {}
    from refold.memory import TARGETS

    out: dict[str, Any] = {}
    for target in TARGETS:
        view = store.read(target)
        # display(): an entry the injection scanner objects to is shown as a placeholder
        out[target] = {"entries": [{"id": e.id, "text": e.display(), "blocked": e.blocked,
                                    "updated_at": e.updated_at} for e in view.entries],
                       "chars": view.usage.chars, "limit": view.usage.limit}
    return out
