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
Results are bounded (per message and in total: ``MAX_RESULT_CHARS`` of JSON, always valid) so
one call cannot flood the context. What a bound cuts is said (``truncated``, ``query_clipped``)
and a page of ``read`` then ends where its messages end: paging by ``next_start_seq`` reads
every message once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from refold.errors import InvalidInput
from refold.messages.model import content_text, searchable_text
from refold.search.query import MAX_QUERY_CHARS
from refold.store.base import SearchHit, SearchQuery, Session, Store, StoredMessage
from refold.tools.registry import Tool, arg_int, arg_str, to_json

if TYPE_CHECKING:
    from refold.references.spill import SpillStore

SessionRef = str | Callable[[], str] | None  # a fixed id, or a getter (e.g. lambda: rt.session_id)
MAX_MESSAGE_CHARS = 800
MAX_RESULT_CHARS = 16_000
MODES = ("search", "around", "read", "recent", "spill")
ROLES = ("user", "assistant", "tool", "system", "developer")
SEARCH_MODES = ("fts", "vector", "hybrid")
MAX_SEQ = 2**62  # a seq reaches the database as given: keep it within a signed 64-bit INTEGER
CLIPPED = " …[clipped to fit the result]"

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
        "role": {"type": "string", "enum": list(ROLES)},
        "limit": {"type": "integer", "description": "Max hits / messages / sessions."},
        "window": {"type": "integer", "description": "Messages shown each side (0-5)."},
        "search_mode": {"type": "string", "enum": list(SEARCH_MODES),
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


def _fits(result: dict[str, Any]) -> bool:
    return len(to_json(result)) <= MAX_RESULT_CHARS


def _fit_messages(result: dict[str, Any], keep: int) -> None:
    """Drop ``result["messages"]`` until the result fits, from the end farther from message
    ``keep`` (the one asked for: ``read``'s first, ``around``'s centre), and say so
    (``truncated``). That message is never dropped: when it alone does not fit, its text is
    clipped, marked so."""
    messages: list[dict[str, Any]] = result["messages"]
    if _fits(result):
        return
    result["truncated"] = True
    while len(messages) > 1 and not _fits(result):
        if len(messages) - 1 - keep >= keep:
            messages.pop()
        else:
            messages.pop(0)
            keep -= 1
    if messages and not _fits(result):
        row = messages[0]
        text = row["text"].removesuffix(CLIPPED)
        while text and not _fits(result):
            # every character cut shortens the JSON by one or more: one pass is enough
            excess = len(to_json(result)) - MAX_RESULT_CHARS + len(CLIPPED)
            text = text[:max(0, len(text) - excess)]
            row["text"] = text + CLIPPED


def _clip_strings(value: Any, limit: int) -> Any:
    """``value`` with every string longer than ``limit`` clipped (dicts and lists walked)."""
    if isinstance(value, str):
        return value if len(value) <= limit else value[:limit] + CLIPPED
    if isinstance(value, dict):
        return {k: _clip_strings(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [_clip_strings(v, limit) for v in value]
    return value


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
        role = arg_str(args, "role") or None
        if role is not None and role not in ROLES:
            raise InvalidInput(f"role must be one of {', '.join(ROLES)}")
        from refold.search.modes import EMBED_MODEL
        from refold.search.vectors import hybrid_search, resolve_mode

        # (twice the hits: the current conversation's copies are left out after, ``_past``)
        request = SearchQuery(text=query, role=role, owner=self.owner, limit=limit * 2,
                              window=window, exclude_session_id=self.current_session_id)
        try:
            mode = resolve_mode(self.store, arg_str(args, "search_mode"))
        except ValueError:
            raise InvalidInput(f"search_mode must be one of {', '.join(SEARCH_MODES)}") from None
        hits = self._past(hybrid_search(self.store, request, mode=mode))[:limit]
        # the search reads the first MAX_QUERY_CHARS only: the echo says so, and stays small
        out: dict[str, Any] = {"query": query[:MAX_QUERY_CHARS]}
        if len(query) > MAX_QUERY_CHARS:
            out["query_clipped"] = True
        out.update(sessions=self._group(hits), hits=len(hits))
        if mode != "fts" and not self.store.vectors_after(EMBED_MODEL, 0, limit=1):
            out["note"] = (f"the archive has no vectors yet, so search_mode={mode} "
                           + ("found nothing" if mode == "vector" else "matched words only")
                           + " (run `refold index` to embed it)")
        return out

    def _past(self, hits: list[SearchHit]) -> list[SearchHit]:
        """The hits that are not the current conversation's own messages: a fork, a branch or
        a compaction child holds copies of its parent's messages (the same identity), which
        come back as the parent's hit once the current session's rows are left out."""
        current = self.current_session_id
        hits = [h for h in hits if h.session_id != current]
        if current is None or not hits:
            return hits
        roots = self.store.lineage_roots({current, *(h.session_id for h in hits)})
        kin = [h for h in hits if roots.get(h.session_id) == roots.get(current)]
        if not kin:
            return hits
        mine = {m.identity for m in self.store.iter_messages(current)}
        copies = set()
        for hit in kin:
            found = self.store.get_messages(hit.session_id, include_inactive=True,
                                            start_seq=hit.seq, end_seq=hit.seq)
            if found and found[0].identity in mine:
                copies.add((hit.session_id, hit.seq))
        return [h for h in hits if (h.session_id, h.seq) not in copies]

    def around(self, args: dict[str, Any]) -> dict[str, Any]:
        session = self._session(args)
        seq = args.get("seq")
        if not isinstance(seq, int) or isinstance(seq, bool):
            raise InvalidInput("mode=around needs an integer 'seq'")
        if not 0 <= seq <= MAX_SEQ:
            raise InvalidInput("'seq' is out of range (messages are numbered from 1)")
        window = arg_int(args, "window", 4, lo=0, hi=20)
        rows = self.store.messages_around(session.id, seq, before=window, after=window)
        out = {**_session_head(session), "messages": [_row(r, mark=r.seq == seq) for r in rows]}
        # the message asked for (or the nearest one shown) stays; its neighbours go first
        centre = min(range(len(rows)), key=lambda i: abs(rows[i].seq - seq), default=0)
        _fit_messages(out, centre)
        return out

    def read(self, args: dict[str, Any]) -> dict[str, Any]:
        session = self._session(args)
        start = arg_int(args, "start_seq", 0, lo=0, hi=2**62)
        limit = arg_int(args, "limit", 20, lo=1, hi=100)
        rows = self.store.get_messages(session.id, start_seq=start, limit=limit + 1)
        more = len(rows) > limit
        rows = rows[:limit]
        out = {**_session_head(session), "messages": [_row(r) for r in rows]}
        if not rows:
            return out
        out["next_start_seq"] = rows[-1].seq + 1  # counted while fitting; a cut only lowers it
        _fit_messages(out, 0)
        shown = out["messages"]
        if len(shown) < len(rows):  # the messages cut to fit come next
            out["next_start_seq"] = shown[-1]["seq"] + 1
        elif not more:
            del out["next_start_seq"]
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
        # escapes (quotes, backslashes, control characters) can double a page's JSON: cut it
        # to fit, and the next page starts where this one ends
        while len(out["text"]) > 1 and not _fits({**out, "next_offset": page.total_chars}):
            excess = len(to_json({**out, "next_offset": page.total_chars})) - MAX_RESULT_CHARS
            out["text"] = out["text"][:max(1, len(out["text"]) - excess)]
        end = page.offset + len(out["text"])
        if end < page.total_chars:
            out["next_offset"] = end
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
            if hit.by_meaning:  # near the query in meaning, none of its words: maybe unrelated
                match["by_meaning"] = True
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
        """``result`` as JSON of at most ``MAX_RESULT_CHARS``, cut where it can be said:
        never a slice of the JSON text (``around`` and ``read`` fitted their messages)."""
        if _fits(result):
            return to_json(result)
        # drop windows from the end until it fits; the matches themselves stay
        for group in reversed(result.get("sessions", [])):
            if group.get("window"):
                group["window"] = []
                if _fits(result):
                    return to_json(result)
        # then whole entries from the end: matches (and their emptied sessions), sessions
        sessions = result.get("sessions") or []
        while sessions and not _fits(result):
            result["truncated"] = True
            matches = sessions[-1].get("matches")
            if matches and len(matches) > 1:
                matches.pop()
            else:
                sessions.pop()
        if _fits(result):
            return to_json(result)
        # a head too long to fit (an enormous title, say): its long strings are clipped
        clipped = _clip_strings(result, 200)
        if _fits(clipped):
            return to_json(clipped)
        paging = {k: result[k] for k in ("next_start_seq", "next_offset") if k in result}
        return to_json({"truncated": True, "error": "the result does not fit in "
                        f"{MAX_RESULT_CHARS} characters", **paging})


def session_search_tool(store: Store, *, current_session_id: SessionRef = None,
                        owner: str | None = "", spill: SpillStore | None = None) -> Tool:
    """The ``session_search`` tool bound to ``store`` (and the caller's current session)."""
    logic = SessionSearch(store, current_session_id=current_session_id, owner=owner,
                          spill=spill)
    return Tool("session_search", DESCRIPTION, PARAMETERS, logic)
