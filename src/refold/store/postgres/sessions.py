"""Sessions on PostgreSQL: create, resolve, list, rename, counters, lineage and pruning.

Lineage queries are recursive CTEs, so ancestors and descendants cost one round trip however deep
the chain. Titles are sanitized and numbered by ``refold.store.titles`` (shared with SQLite);
uniqueness per owner is enforced by a unique index on (owner, title), so two hosts cannot both
take "name #3", and one tenant's titles never block (or reveal) another's.

Same rules as SQLite (the conformance suite pins them): ``resolve_session`` tries the exact id,
then the title (a plain name means its highest "#N"), then a unique id prefix (LIKE wildcards
escaped); ``delete_session`` re-parents children to the deleted session's parent (or makes them
roots); ``resolve_resume`` follows compaction children only, newest at each step.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from refold.errors import AmbiguousReference, Conflict, InvalidInput, NotFound
from refold.store.base import AGENT_EVENT, AGENT_EVENTS, Session, SessionDraft, Usage, started
from refold.store.postgres.codec import encode_json
from refold.store.postgres.core import SESSION_COLS, Cursor, PgCore, session_from_row
from refold.store.titles import (
    like_escape,
    reads_as_id_prefix,
    refuse_id_prefix_title,
    sanitize_title,
    split_lineage_title,
    title_shadows_id,
    titled_session,
)
from refold.store.titles import next_lineage_title as next_title_from

LINK_KINDS = ("compaction", "branch", "fork", "side", "subagent", "continuation")

# The longest session id a new session takes, in characters. PostgreSQL keeps an indexed value
# in one btree page (at most 2704 bytes per row of ``sessions_pkey``, of ``messages_identity``
# with its 32-character identity): 500 characters are 2000 bytes of UTF-8 at worst, whatever
# the text. Ids refold makes are 32 characters; an agent's own ids (UUIDs) are shorter still.
MAX_SESSION_ID_LENGTH = 500


def new_session_id() -> str:
    return uuid.uuid4().hex


def check_draft(draft: SessionDraft) -> None:
    """InvalidInput for a link kind the store does not know (before any write)."""
    if draft.link_kind is not None and draft.link_kind not in LINK_KINDS:
        raise InvalidInput(f"unknown link kind {draft.link_kind!r}",
                           hint="use one of: " + ", ".join(LINK_KINDS))


def check_session_id(session_id: str) -> None:
    """InvalidInput for an id longer than ``MAX_SESSION_ID_LENGTH`` (which the indexes could
    not hold), before anything is written."""
    if len(session_id) > MAX_SESSION_ID_LENGTH:
        raise InvalidInput(
            f"a session id is at most {MAX_SESSION_ID_LENGTH} characters; this one has "
            f"{len(session_id)}",
            hint="use a shorter id; a title names a session too")


def insert_session(core: PgCore, cur: Cursor, session_id: str,
                   draft: SessionDraft) -> tuple[Any, ...] | None:
    """The session row, inside the caller's transaction; None (nothing written) when the id is
    taken."""
    check_session_id(session_id)
    clean = sanitize_title(draft.title)
    if draft.parent_session_id is not None:
        core._require_session(cur, draft.parent_session_id)
    if clean is not None:
        _check_title_free(cur, clean, draft.owner or "")
    cur.execute(f"""INSERT INTO sessions (id, title, parent_session_id, link_kind, source,
                        model, owner, started_at)
                    VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
                    ON CONFLICT (id) DO NOTHING RETURNING {SESSION_COLS}""",
                (session_id, clean, draft.parent_session_id,
                 draft.link_kind if draft.parent_session_id else None, draft.source,
                 draft.model, draft.owner or "", started(draft.started_at)))
    return cur.fetchone()


def _check_title_free(cur: Cursor, title: str, owner: str, except_id: str | None = None) -> None:
    """Titles are unique per owner: another tenant's title never blocks this one."""
    cur.execute("SELECT id FROM sessions WHERE owner = %s AND title = %s", (owner, title))
    row = cur.fetchone()
    if row is not None and row[0] != except_id:
        raise Conflict(f"the title {title!r} is already used by session {row[0]}",
                       hint="choose another title")


class SessionsMixin(PgCore):
    def create_session(self, *, title: str | None = None, source: str | None = None,
                       model: str | None = None, parent_session_id: str | None = None,
                       link_kind: str | None = None, owner: str = "",
                       session_id: str | None = None,
                       started_at: float | None = None) -> Session:
        draft = SessionDraft(title, source, model, parent_session_id, link_kind, owner,
                             started_at)
        check_draft(draft)
        if session_id is not None and not str(session_id).strip():
            raise InvalidInput("a session id cannot be empty")
        if session_id is not None:
            check_session_id(session_id)
        sid = session_id or new_session_id()
        with self._tx("create session") as cur:
            cur.execute("SELECT 1 FROM sessions WHERE id = %s", (sid,))
            if cur.fetchone() is not None:
                raise Conflict(f"a session with id {sid!r} already exists")
            row = insert_session(self, cur, sid, draft)
            if row is None:
                raise Conflict(f"session {sid!r} already exists")
        return session_from_row(row)

    def _check_title_free(self, cur: Cursor, title: str, owner: str,
                          except_id: str | None = None) -> None:
        _check_title_free(cur, title, owner, except_id)

    def get_session(self, session_id: str) -> Session:
        with self._tx("read session") as cur:
            return self._load_session(cur, session_id)

    def resolve_session(self, ref: str, *, owner: str | None = None,
                        prefix: bool = True, exact: bool = False) -> Session:
        """Exact id, then title (its latest numbered variant), then a unique id prefix."""
        from refold.messages.validate import repair_text

        # a lone surrogate (an argument or a JSON escape that was not UTF-8) names no session;
        # bound as it is, it ended the lookup in a UnicodeEncodeError
        text = repair_text((ref or "").strip())
        if not text:
            raise InvalidInput("a session reference cannot be empty",
                               hint="give a session id, id prefix or title")
        with self._tx("resolve session") as cur:
            found = self._by_id(cur, text)
            if found is not None and (owner is None or found.owner == owner):
                return found
            found = self._by_title(cur, text, owner, newest=not exact)
            if found is not None and (owner is None or found.owner == owner):
                if prefix:
                    title_shadows_id(text, found, self._prefixed_ids(cur, text, owner))
                return found
            if not prefix:  # a name (X-Refold-Session): exact id or title only
                raise NotFound(f"no session with the id or title {text!r}")
            return self._by_prefix(cur, text, owner)

    def _by_id(self, cur: Cursor, ref: str) -> Session | None:
        cur.execute(f"SELECT {SESSION_COLS} FROM sessions WHERE id = %s", (ref,))
        row = cur.fetchone()
        return session_from_row(row) if row else None

    def _lineage_rows(self, cur: Cursor, base: str,
                      owner: str | None) -> list[tuple[str, str]]:
        owner_sql = "" if owner is None else " AND owner = %s"
        cur.execute("SELECT owner, title FROM sessions WHERE (title = %s OR title LIKE %s "
                    "ESCAPE '\\')" + owner_sql,
                    (base, like_escape(base) + " #%", *(() if owner is None else (owner,))))
        return [(r[0], r[1]) for r in cur.fetchall()]

    def _by_title(self, cur: Cursor, ref: str, owner: str | None, *,
                  newest: bool = True) -> Session | None:
        title = sanitize_title(ref)
        if title is None:
            return None
        found = titled_session(title, self._lineage_rows(cur, title, owner), newest=newest)
        return self._titled(cur, *found) if found is not None else None

    def _titled(self, cur: Cursor, owner: str, title: str) -> Session | None:
        cur.execute(f"SELECT {SESSION_COLS} FROM sessions WHERE owner = %s AND title = %s",
                    (owner, title))
        row = cur.fetchone()
        return session_from_row(row) if row else None

    def _prefixed_ids(self, cur: Cursor, ref: str, owner: str | None) -> list[str]:
        owner_sql = "" if owner is None else " AND owner = %s"
        cur.execute(f"SELECT id FROM sessions WHERE id LIKE %s ESCAPE '\\'{owner_sql} LIMIT 21",
                    (like_escape(ref) + "%", *(() if owner is None else (owner,))))
        return [r[0] for r in cur.fetchall()]

    def _by_prefix(self, cur: Cursor, ref: str, owner: str | None) -> Session:
        owner_sql = "" if owner is None else " AND owner = %s"
        cur.execute(f"""SELECT {SESSION_COLS} FROM sessions WHERE id LIKE %s ESCAPE '\\'
                        {owner_sql} ORDER BY started_at DESC LIMIT 21""",
                    (like_escape(ref) + "%", *(() if owner is None else (owner,))))
        rows = cur.fetchall()
        if len(rows) == 1:
            return session_from_row(rows[0])
        if not rows:
            raise NotFound(f"no session matches {ref!r}",
                           hint="`refold sessions list` shows ids and titles")
        ids = [r[0] for r in rows[:20]]
        raise AmbiguousReference(f"{ref!r} matches {len(rows)}{'+' if len(rows) > 20 else ''} "
                                 "sessions", candidates=ids, hint="give more of the id")

    def _lineage_titles(self, cur: Cursor, base: str, owner: str | None = None) -> list[str]:
        owner_sql = "" if owner is None else " AND owner = %s"
        cur.execute("SELECT title FROM sessions WHERE (title = %s OR title LIKE %s ESCAPE '\\')"
                    + owner_sql,
                    (base, like_escape(base) + " #%", *(() if owner is None else (owner,))))
        return [r[0] for r in cur.fetchall()]

    def next_lineage_title(self, title: str) -> str:
        clean = sanitize_title(title)
        if clean is None:
            raise InvalidInput("empty session title")
        base, _ = split_lineage_title(clean)
        with self._tx("number title") as cur:
            return next_title_from(base, self._lineage_titles(cur, base))

    def list_sessions(self, *, limit: int = 50, owner: str | None = None,
                      source: str | None = None) -> list[Session]:
        where, args = ["TRUE"], []
        if owner is not None:
            where.append("owner = %s")
            args.append(owner)
        if source is not None:
            where.append("source = %s")
            args.append(source)
        with self._tx("list sessions") as cur:
            cur.execute(f"""SELECT {SESSION_COLS} FROM sessions WHERE {' AND '.join(where)}
                            ORDER BY started_at DESC, id DESC LIMIT %s""",
                        (*args, max(0, limit)))
            return [session_from_row(r) for r in cur.fetchall()]

    def rename_session(self, session_id: str, title: str) -> Session:
        clean = sanitize_title(title)
        if clean is None:
            raise InvalidInput("a session title cannot be empty")
        with self._tx("rename session") as cur:
            session = self._load_session(cur, session_id)
            self._check_title_free(cur, clean, session.owner, except_id=session_id)
            if reads_as_id_prefix(clean):  # it would shadow another session's id prefix
                refuse_id_prefix_title(clean, session_id,
                                       self._prefixed_ids(cur, clean.lower(), session.owner))
            cur.execute(f"UPDATE sessions SET title = %s WHERE id = %s RETURNING {SESSION_COLS}",
                        (clean, session_id))
            row = cur.fetchone()
        assert row is not None
        return session_from_row(row)

    def delete_session(self, session_id: str) -> int:
        """Remove the session and its rows; children move to its parent (or become roots)."""
        with self._tx("delete session") as cur:
            return self._delete(cur, self._load_session(cur, session_id, lock=True))

    def _delete(self, cur: Cursor, session: Session) -> int:
        if session.parent_session_id is None:
            cur.execute("UPDATE sessions SET parent_session_id = NULL, link_kind = NULL, "
                        "fork_seq = NULL WHERE parent_session_id = %s", (session.id,))
        else:
            cur.execute("UPDATE sessions SET parent_session_id = %s WHERE parent_session_id = %s",
                        (session.parent_session_id, session.id))
        cur.execute("DELETE FROM messages WHERE session_id = %s", (session.id,))
        removed = cur.rowcount
        cur.execute("DELETE FROM sessions WHERE id = %s", (session.id,))
        return removed

    def end_session(self, session_id: str, reason: str) -> None:
        with self._tx("end session") as cur:
            cur.execute("UPDATE sessions SET ended_at = %s, end_reason = %s WHERE id = %s",
                        (time.time(), reason, session_id))
            if cur.rowcount == 0:
                raise NotFound(f"no session {session_id!r}")

    def add_usage(self, session_id: str, *, input_tokens: int = 0, output_tokens: int = 0,
                  cache_read_tokens: int = 0, cost_usd: float = 0.0,
                  model: str | None = None) -> None:
        with self._tx("add usage") as cur:
            add_usage_in(cur, session_id, Usage(input_tokens, output_tokens, cache_read_tokens,
                                                cost_usd, model))

    def prune_sessions(self, older_than_days: float) -> int:
        """Whole lineages only, as on SQLite (``refold.store.lifecycle``)."""
        from refold.store.lifecycle import prune_older_than

        return prune_older_than(self, older_than_days)  # type: ignore[arg-type]  # a mixin

    # -- lineage ----------------------------------------------------------------------------
    def ancestors(self, session_id: str) -> list[Session]:
        """Parent first, then its parent, up to the root (cycles cannot loop: depth-capped)."""
        with self._tx("read ancestors") as cur:
            self._require_session(cur, session_id)
            cur.execute(f"""WITH RECURSIVE up(id, depth) AS (
                                SELECT parent_session_id, 1 FROM sessions WHERE id = %s
                                UNION ALL
                                SELECT s.parent_session_id, up.depth + 1 FROM sessions s
                                JOIN up ON s.id = up.id WHERE up.depth < 10000)
                            SELECT {', '.join('s.' + c for c in SESSION_COLS.split(', '))}
                            FROM up JOIN sessions s ON s.id = up.id ORDER BY up.depth""",
                        (session_id,))
            return [session_from_row(r) for r in cur.fetchall()]

    def sessions_of_agent(self, agent: str, *, owner: str = "",
                          limit: int = 16) -> list[tuple[str, bool]]:
        """See ``Store.sessions_of_agent`` (the partial index ``events_agent``)."""
        with self._tx("find sessions by their agent's id") as cur:
            cur.execute(
                "SELECT e.session_id, e.kind FROM events e JOIN sessions s ON s.id = e.session_id "
                "WHERE e.kind IN (%s, %s, %s) AND e.payload_json = %s AND s.owner = %s "
                "ORDER BY e.id DESC LIMIT %s",
                (*AGENT_EVENTS, encode_json({"id": agent}), owner,
                 max(0, int(limit))))
            return [(str(r[0]), r[1] != AGENT_EVENT) for r in cur.fetchall()]

    def link_session(self, session_id: str, parent_session_id: str, link_kind: str) -> bool:
        if session_id == parent_session_id:
            return False
        with self._tx("link a session") as cur:
            cur.execute(
                "UPDATE sessions SET parent_session_id = %s, link_kind = %s WHERE id = %s "
                "AND parent_session_id IS NULL AND EXISTS (SELECT 1 FROM sessions WHERE id = %s)",
                (parent_session_id, link_kind, session_id, parent_session_id))
            return bool(cur.rowcount)

    def children(self, session_id: str) -> list[Session]:
        with self._tx("read children") as cur:
            self._require_session(cur, session_id)
            cur.execute(f"""SELECT {SESSION_COLS} FROM sessions WHERE parent_session_id = %s
                            ORDER BY started_at, id""", (session_id,))
            return [session_from_row(r) for r in cur.fetchall()]

    def resolve_resume(self, session_id: str) -> Session:
        """Follow compaction children (newest at each step); the deepest with messages wins.

        Branches and forks are separate conversations, resumed by their own id.
        """
        with self._tx("resolve resume") as cur:
            start = self._load_session(cur, session_id)
            cur.execute(f"""WITH RECURSIVE chain(id, depth) AS (
                                SELECT %s::text, 0
                                UNION ALL
                                SELECT (SELECT c.id FROM sessions c
                                        WHERE c.parent_session_id = chain.id
                                          AND c.link_kind = 'compaction'
                                        ORDER BY c.started_at DESC, c.id DESC LIMIT 1),
                                       chain.depth + 1
                                FROM chain WHERE chain.id IS NOT NULL AND chain.depth < 10000)
                            SELECT {', '.join('s.' + c for c in SESSION_COLS.split(', '))}
                            FROM chain JOIN sessions s ON s.id = chain.id
                            WHERE chain.depth > 0 AND s.message_count > 0
                            ORDER BY chain.depth DESC LIMIT 1""", (session_id,))
            row = cur.fetchone()
        return session_from_row(row) if row else start


def add_usage_in(cur: Cursor, session_id: str, usage: Usage) -> None:
    """Add ``usage`` to the session's totals inside the caller's transaction."""
    cur.execute("""UPDATE sessions SET input_tokens = input_tokens + %s,
                        output_tokens = output_tokens + %s,
                        cache_read_tokens = cache_read_tokens + %s,
                        cost_usd = cost_usd + %s, model = coalesce(%s, model)
                    WHERE id = %s""",
                (int(usage.input_tokens), int(usage.output_tokens), int(usage.cache_read_tokens),
                 float(usage.cost_usd), usage.model, session_id))
    if cur.rowcount == 0:
        raise NotFound(f"no session {session_id!r}")
