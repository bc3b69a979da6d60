"""Read endpoints under ``/v1/refold/``: sessions, one session's messages, search, memory.

Every read is scoped to the caller's tenant: the store is always asked with ``owner=tenant``, and
a record that comes back with another owner is treated as missing (defense in depth), so one
key can neither list nor open nor find another key's sessions. Store calls run in worker threads.
"""

from __future__ import annotations

from typing import Any

import anyio.to_thread

from refold import _records as records
from refold.errors import InvalidInput, NotFound
from refold.server.sessions import SessionPool
from refold.store.base import SearchHit, SearchQuery, Session, Store, StoredMessage

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


async def search(store: Store, owner: str, text: str, limit: int,
                 mode: str | None = None) -> dict[str, Any]:
    """``mode``: fts, vector or hybrid (default: hybrid once the archive is indexed)."""
    from refold.search.vectors import hybrid_search, resolve_mode

    if not text.strip():
        raise InvalidInput("search needs a query: ?q=...")
    try:
        chosen = resolve_mode(store, mode)
    except ValueError as exc:
        raise InvalidInput(str(exc)) from None
    query = SearchQuery(text=text, owner=owner, limit=limit)
    hits = await anyio.to_thread.run_sync(lambda: hybrid_search(store, query, mode=chosen))
    return {"object": "list", "query": text, "data": [hit_json(h) for h in hits]}


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
