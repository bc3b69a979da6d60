"""The ``session_search`` tool: an agent's way into its past sessions.

Five modes, all over the ``Store`` Protocol (the last over the references' spill store):

- ``search``: full-text query (English, CJK, 1–2 character CJK too) → hits grouped by session,
  each with an anchored window of the messages around it;
- ``around``: scroll a window around a message (``session_id`` + ``seq``);
- ``read``: page through a session from ``start_seq``;
- ``recent``: browse the most recent sessions;
- ``spill``: page through the full text an ``@session`` reference spilled (``spill_id``).

Invariant: the current session's own rows never come back as "history" — search excludes it
(``SearchQuery.exclude_session_id``), ``recent`` skips it, and ``around``/``read`` refuse it.
Results are bounded (per message and in total) so one call cannot flood the context.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from refold.errors import InvalidInput
from refold.messages.model import content_text, searchable_text
from refold.store.base import SearchHit, SearchQuery, Session, Store, StoredMessage
from refold.tools.registry import Tool, arg_int, arg_str, to_json

if TYPE_CHECKING:
    from refold.references.spill import SpillStore

SessionRef = str | Callable[[], str] | None  # a fixed id, or a getter (e.g. lambda: rt.session_id)
MAX_MESSAGE_CHARS = 800
MAX_RESULT_CHARS = 16_000
MODES = ("search", "around", "read", "recent", "spill")

DESCRIPTION = (
    "Search and read your past sessions (not the current one). mode=search (default) finds "
    "messages matching `query` (any language) and shows each hit with the messages around it; "
    "mode=around scrolls around message `seq` of `session_id`; mode=read pages through a "
    "session from `start_seq`; mode=recent lists recent sessions; mode=spill pages through a referenced "
    "session's full text by `spill_id` from `offset`. Use it when the user refers "
    "to earlier work or you need a detail that is no longer in your context.")

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "mode": {"type": "string", "enum": list(MODES)},
        "query": {"type": "string", "description": "Words to find (mode=search)."},
        "session_id": {"type": "string", "description": "Session id, id prefix or title."},
        "seq": {"type": "integer", "description": "Message number to center on (around)."},
        "start_seq": {"type": "integer", "description": "First message to read (read)."},
        "role": {"type": "string", "enum": ["user", "assistant", "tool", "system"]},
        "limit": {"type": "integer", "description": "Max hits / messages / sessions."},
        "window": {"type": "integer", "description": "Messages shown each side (0-5)."},
        "search_mode": {"type": "string", "enum": ["fts", "vector", "hybrid"],
                        "description": "Words, meaning or both (default: hybrid once the "
                                       "archive is indexed, else fts)."},
        "spill_id": {"type": "string", "description": "Id from a Referenced sessions block."},
        "offset": {"type": "integer", "description": "Character offset to read from (spill)."},
    },
    "additionalProperties": False,
}


def _clip(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    text = text.strip()
    if len(text) <= limit:
        return text
    return text[:limit] + f" …[+{len(text) - limit} chars]"


def _when(ts: float | None) -> str | None:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts)) if ts else None


def _row(row: StoredMessage, *, mark: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"seq": row.seq, "role": row.role,
                           "text": _clip(searchable_text(row.message))}
    if mark:
        out["hit"] = True
    if not row.active:
        out["rewound"] = True
    return out


def _session_head(session: Session) -> dict[str, Any]:
    return {"session_id": session.id, "title": session.title,
            "started": _when(session.started_at), "messages": session.message_count}


class SessionSearch:
    """The tool's logic, bound to a store, an owner namespace and the current session."""

    def __init__(self, store: Store, *, current_session_id: SessionRef = None,
                 owner: str | None = "", spill: SpillStore | None = None) -> None:
        self.store = store
        self._current = current_session_id
        self.owner = owner
        self.spills = spill  # where @session references keep full texts (mode=spill)

    @property
    def current_session_id(self) -> str | None:
        """The caller's session now (a runtime may move to a compaction child)."""
        return self._current() if callable(self._current) else self._current

    def __call__(self, args: dict[str, Any]) -> str:
        mode = arg_str(args, "mode", "search") or "search"
        if mode not in MODES:
            raise InvalidInput(f"mode must be one of {', '.join(MODES)}")
        result: dict[str, Any] = getattr(self, mode)(args)
        return self._bounded(result)

    # -- modes ---------------------------------------------------------------------------------
    def search(self, args: dict[str, Any]) -> dict[str, Any]:
        query = (arg_str(args, "query") or "").strip()
        if not query:
            raise InvalidInput("mode=search needs a non-empty 'query'")
        limit = arg_int(args, "limit", 8, lo=1, hi=30)
        window = arg_int(args, "window", 2, lo=0, hi=5)
        from refold.search.vectors import hybrid_search, resolve_mode

        request = SearchQuery(text=query, role=arg_str(args, "role"), owner=self.owner,
                              limit=limit, window=window,
                              exclude_session_id=self.current_session_id)
        try:
            mode = resolve_mode(self.store, arg_str(args, "search_mode"))
        except ValueError as exc:
            raise InvalidInput(str(exc)) from None
        hits = hybrid_search(self.store, request, mode=mode)
        hits = [h for h in hits if h.session_id != self.current_session_id]
        return {"query": query, "sessions": self._group(hits), "hits": len(hits)}

    def around(self, args: dict[str, Any]) -> dict[str, Any]:
        session = self._session(args)
        seq = args.get("seq")
        if not isinstance(seq, int) or isinstance(seq, bool):
            raise InvalidInput("mode=around needs an integer 'seq'")
        window = arg_int(args, "window", 4, lo=0, hi=20)
        rows = self.store.messages_around(session.id, seq, before=window, after=window)
        return {**_session_head(session),
                "messages": [_row(r, mark=r.seq == seq) for r in rows]}

    def read(self, args: dict[str, Any]) -> dict[str, Any]:
        session = self._session(args)
        start = arg_int(args, "start_seq", 0, lo=0, hi=2**62)
        limit = arg_int(args, "limit", 20, lo=1, hi=100)
        rows = self.store.get_messages(session.id, start_seq=start, limit=limit + 1)
        more = len(rows) > limit
        rows = rows[:limit]
        out = {**_session_head(session), "messages": [_row(r) for r in rows]}
        if more:
            out["next_start_seq"] = rows[-1].seq + 1
        return out

    def recent(self, args: dict[str, Any]) -> dict[str, Any]:
        limit = arg_int(args, "limit", 10, lo=1, hi=50)
        sessions = self.store.list_sessions(limit=limit + 1, owner=self.owner)
        listed = [s for s in sessions if s.id != self.current_session_id][:limit]
        return {"sessions": [{**_session_head(s), "preview": self._preview(s)} for s in listed]}

    def spill(self, args: dict[str, Any]) -> dict[str, Any]:
        if self.spills is None:
            raise InvalidInput("no spilled texts here (no @session reference was expanded)")
        page = self.spills.read(arg_str(args, "spill_id") or "",
                               offset=arg_int(args, "offset", 0, lo=0, hi=2**62))
        out: dict[str, Any] = {"spill_id": page.spill_id, "offset": page.offset,
                               "total_chars": page.total_chars, "text": page.text}
        if page.next_offset is not None:
            out["next_offset"] = page.next_offset
        return out

    # -- helpers -------------------------------------------------------------------------------
    def _session(self, args: dict[str, Any]) -> Session:
        ref = (arg_str(args, "session_id") or "").strip()
        if not ref:
            raise InvalidInput("this mode needs 'session_id' (an id, id prefix or title)")
        session = self.store.resolve_session(ref, owner=self.owner)
        if session.id == self.current_session_id:
            raise InvalidInput("that is the current session; its messages are already your "
                               "context — search other sessions instead")
        return session

    def _preview(self, session: Session) -> str:
        for row in self.store.get_messages(session.id, limit=6):
            if row.role == "user":
                return _clip(content_text(row.message), 160)
        return ""

    def _group(self, hits: list[SearchHit]) -> list[dict[str, Any]]:
        groups: dict[str, dict[str, Any]] = {}
        for hit in hits:
            group = groups.setdefault(hit.session_id, {
                "session_id": hit.session_id, "title": hit.session_title,
                "matches": [], "_rows": {}})
            match = {"seq": hit.seq, "role": hit.role, "snippet": hit.snippet,
                     "when": _when(hit.created_at)}
            if len(hit.lineage) > 1:  # the same message in other sessions of its lineage
                match["also_in"] = [s for s in hit.lineage if s != hit.session_id]
            group["matches"].append(match)
            rows: dict[int, dict[str, Any]] = group["_rows"]
            for row in hit.window or []:
                rows.setdefault(row.seq, _row(row))
            rows.setdefault(hit.seq, {"seq": hit.seq, "role": hit.role,
                                      "text": _clip(hit.content)})
            rows[hit.seq]["hit"] = True
        out = []
        for group in groups.values():
            rows = group.pop("_rows")
            group["window"] = [rows[k] for k in sorted(rows)]
            out.append(group)
        return out

    @staticmethod
    def _bounded(result: dict[str, Any]) -> str:
        text = to_json(result)
        if len(text) <= MAX_RESULT_CHARS:
            return text
        # drop windows from the end until it fits; the matches themselves stay
        for group in reversed(result.get("sessions", [])):
            group["window"] = []
            text = to_json(result)
            if len(text) <= MAX_RESULT_CHARS:
                return text
        for key in ("messages",):
            while result.get(key) and len(to_json(result)) > MAX_RESULT_CHARS:
                result[key].pop()
                result["truncated"] = True
        return to_json(result)[: MAX_RESULT_CHARS * 2]


def session_search_tool(store: Store, *, current_session_id: SessionRef = None,
                        owner: str | None = "", spill: SpillStore | None = None) -> Tool:
    """The ``session_search`` tool bound to ``store`` (and the caller's current session)."""
    logic = SessionSearch(store, current_session_id=current_session_id, owner=owner,
                          spill=spill)
    return Tool("session_search", DESCRIPTION, PARAMETERS, logic)
