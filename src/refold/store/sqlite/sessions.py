"""Sessions on SQLite: create, look up, resolve references, rename, delete, usage, lineage.

Invariants:
- Titles are sanitized (``refold.store.titles``) and unique per owner: taking a title the same
  owner uses is a Conflict; another owner's title never blocks it. Without an owner, a title
  resolves to the only owner that has it, else the local owner's, else AmbiguousReference.
- ``resolve_session`` tries, in order: the exact id; the title (a plain ``name`` resolves to the
  highest ``name #N`` of its lineage); a unique id prefix (LIKE wildcards in the reference are
  escaped). Several prefix matches raise AmbiguousReference listing them; none raises NotFound.
- ``delete_session`` removes the session and every row it owns (messages, checkpoints, events,
  rewinds). Its children are re-parented to its parent, keeping their link kind; when it has no
  parent the children become roots (link kind and fork seq cleared).
- ``resolve_resume`` follows *compaction* children only (a continuation of the same
  conversation); branches and forks are separate conversations that are resumed by their own id.
  It walks to the newest child at each step and returns the deepest session on that path that has
  messages (the start itself when none has).
"""

from __future__ import annotations

import sqlite3
import time

from refold.errors import AmbiguousReference, Conflict, InvalidInput, NotFound
from refold.store.base import AGENT_EVENT, AGENT_EVENTS, Session, SessionDraft, Usage, started
from refold.store.sqlite import grams
from refold.store.sqlite.database import Database
from refold.store.sqlite.rows import SESSION_COLUMNS, encode_json, to_session
from refold.store.titles import (
    like_escape,
    next_lineage_title,
    reads_as_id_prefix,
    refuse_id_prefix_title,
    sanitize_title,
    split_lineage_title,
    title_shadows_id,
    titled_session,
)

LINK_KINDS = frozenset({"compaction", "branch", "fork", "side", "subagent", "continuation"})



def check_draft(draft: SessionDraft) -> None:
    """InvalidInput for a link kind the store does not know (before any write)."""
    if draft.link_kind is not None and draft.link_kind not in LINK_KINDS:
        raise InvalidInput(f"unknown link kind {draft.link_kind!r}",
                           hint="use compaction, branch or fork")


def _new_id() -> str:
    import uuid  # on first use: importing uuid loads platform (start-up time of read commands)

    return uuid.uuid4().hex

class SessionOps:
    """Mixin: session rows. Needs ``self.db``."""

    db: Database

    def _session(self, conn: sqlite3.Connection, session_id: str) -> Session:
        row = conn.execute(f"SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?",
                           (session_id,)).fetchone()
        if row is None:
            raise NotFound(f"no session {session_id!r}",
                           hint="`refold sessions list` shows the sessions")
        return to_session(row)

    def _check_title_free(self, conn: sqlite3.Connection, title: str | None, owner: str,
                          session_id: str | None = None) -> None:
        """Titles are unique per owner: another tenant's title never blocks this one."""
        if title is None:
            return
        row = conn.execute("SELECT id FROM sessions WHERE owner = ? AND title = ?",
                           (owner, title)).fetchone()
        if row is not None and row[0] != session_id:
            raise Conflict(f"the title {title!r} is already used by session {row[0]}",
                           hint="choose another title")

    def create_session(self, *, title: str | None = None, source: str | None = None,
                       model: str | None = None, parent_session_id: str | None = None,
                       link_kind: str | None = None, owner: str = "",
                       session_id: str | None = None,
                       started_at: float | None = None) -> Session:
        if session_id is not None and not str(session_id).strip():
            raise InvalidInput("a session id cannot be empty")
        draft = SessionDraft(title, source, model, parent_session_id, link_kind, owner,
                             started_at)
        check_draft(draft)
        new_id = session_id or _new_id()
        with self.db.write() as conn:
            if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (new_id,)).fetchone():
                raise Conflict(f"a session with id {new_id!r} already exists")
            self._insert_session(conn, new_id, draft)
            return self._session(conn, new_id)

    def _insert_session(self, conn: sqlite3.Connection, session_id: str,
                        draft: SessionDraft) -> None:
        """The session row, inside the caller's write transaction (the id is free)."""
        clean = sanitize_title(draft.title)
        if draft.parent_session_id is not None:
            self._session(conn, draft.parent_session_id)
        self._check_title_free(conn, clean, draft.owner or "")
        conn.execute(
            "INSERT INTO sessions (id, title, parent_session_id, link_kind, source, model, "
            "owner, started_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (session_id, clean, draft.parent_session_id,
             draft.link_kind if draft.parent_session_id is not None else None,
             draft.source, draft.model, draft.owner or "", started(draft.started_at)))

    def get_session(self, session_id: str) -> Session:
        with self.db.read() as conn:
            return self._session(conn, session_id)

    def resolve_session(self, ref: str, *, owner: str | None = None,
                        prefix: bool = True, exact: bool = False) -> Session:
        from refold.messages.validate import repair_text

        # a lone surrogate (an argument or a JSON escape that was not UTF-8) names no session;
        # bound as it is, it ended the lookup in a UnicodeEncodeError
        text = repair_text((ref or "").strip())
        if not text:
            raise InvalidInput("a session reference cannot be empty",
                               hint="give a session id, id prefix or title")
        with self.db.read() as conn:
            found = self._by_id(conn, text)
            if found is not None and (owner is None or found.owner == owner):
                return found
            found = self._by_title(conn, text, owner, newest=not exact)
            if found is not None and (owner is None or found.owner == owner):
                if prefix:
                    title_shadows_id(text, found, self._prefixed_ids(conn, text, owner))
                return found
            if not prefix:  # a name (X-Refold-Session): exact id or title only
                raise NotFound(f"no session with the id or title {text!r}")
            return self._by_prefix(conn, text, owner)

    def _by_id(self, conn: sqlite3.Connection, ref: str) -> Session | None:
        row = conn.execute(f"SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?",
                           (ref,)).fetchone()
        return to_session(row) if row else None

    def _lineage_titles(self, conn: sqlite3.Connection, base: str,
                        owner: str | None = None) -> list[str]:
        sql = "SELECT title FROM sessions WHERE (title = ? OR title LIKE ? ESCAPE '\\')"
        args: list[object] = [base, like_escape(base) + " #%"]
        if owner is not None:
            sql += " AND owner = ?"
            args.append(owner)
        return [r[0] for r in conn.execute(sql, args)]

    def _lineage_rows(self, conn: sqlite3.Connection, base: str,
                      owner: str | None) -> list[tuple[str, str]]:
        sql = "SELECT owner, title FROM sessions WHERE (title = ? OR title LIKE ? ESCAPE '\\')"
        args: list[object] = [base, like_escape(base) + " #%"]
        if owner is not None:
            sql += " AND owner = ?"
            args.append(owner)
        return [(r[0], r[1]) for r in conn.execute(sql, args)]

    def _by_title(self, conn: sqlite3.Connection, ref: str, owner: str | None, *,
                  newest: bool = True) -> Session | None:
        title = sanitize_title(ref)
        if title is None:
            return None
        found = titled_session(title, self._lineage_rows(conn, title, owner), newest=newest)
        return self._titled(conn, *found) if found is not None else None

    def _titled(self, conn: sqlite3.Connection, owner: str, title: str) -> Session | None:
        row = conn.execute(f"SELECT {SESSION_COLUMNS} FROM sessions WHERE owner = ? AND "
                           "title = ?", (owner, title)).fetchone()
        return to_session(row) if row else None

    def _prefixed_ids(self, conn: sqlite3.Connection, ref: str, owner: str | None
                      ) -> list[str]:
        sql = "SELECT id FROM sessions WHERE id LIKE ? ESCAPE '\\'"
        args: list[object] = [like_escape(ref) + "%"]
        if owner is not None:
            sql += " AND owner = ?"
            args.append(owner)
        return [r[0] for r in conn.execute(sql + " LIMIT 21", args)]

    def _by_prefix(self, conn: sqlite3.Connection, ref: str, owner: str | None) -> Session:
        sql = f"SELECT {SESSION_COLUMNS} FROM sessions WHERE id LIKE ? ESCAPE '\\'"
        args: list[object] = [like_escape(ref) + "%"]
        if owner is not None:
            sql += " AND owner = ?"
            args.append(owner)
        rows = conn.execute(sql + " ORDER BY started_at DESC LIMIT 21", args).fetchall()
        if len(rows) == 1:
            return to_session(rows[0])
        if not rows:
            raise NotFound(f"no session matches {ref!r}",
                           hint="`refold sessions list` shows ids and titles")
        ids = [r[0] for r in rows[:20]]
        raise AmbiguousReference(f"{ref!r} matches {len(rows)}{'+' if len(rows) > 20 else ''} "
                                 "sessions", candidates=ids, hint="give more of the id")

    def list_sessions(self, *, limit: int = 50, owner: str | None = None,
                      source: str | None = None) -> list[Session]:
        sql = f"SELECT {SESSION_COLUMNS} FROM sessions WHERE 1 = 1"
        args: list[object] = []
        if owner is not None:
            sql += " AND owner = ?"
            args.append(owner)
        if source is not None:
            sql += " AND source = ?"
            args.append(source)
        sql += " ORDER BY started_at DESC, rowid DESC LIMIT ?"
        args.append(max(0, int(limit)))
        with self.db.read() as conn:
            return [to_session(r) for r in conn.execute(sql, args)]

    def rename_session(self, session_id: str, title: str) -> Session:
        clean = sanitize_title(title)
        if clean is None:
            raise InvalidInput("a session title cannot be empty")
        with self.db.write() as conn:
            session = self._session(conn, session_id)
            self._check_title_free(conn, clean, session.owner, session_id)
            if reads_as_id_prefix(clean):  # it would shadow another session's id prefix
                refuse_id_prefix_title(clean, session_id,
                                       self._prefixed_ids(conn, clean.lower(), session.owner))
            conn.execute("UPDATE sessions SET title = ? WHERE id = ?", (clean, session_id))
            return self._session(conn, session_id)

    def delete_session(self, session_id: str) -> int:
        with self.db.write() as conn:
            return self._delete(conn, self._session(conn, session_id))

    def _delete(self, conn: sqlite3.Connection, session: Session) -> int:
        if session.parent_session_id is None:
            conn.execute("UPDATE sessions SET parent_session_id = NULL, link_kind = NULL, "
                         "fork_seq = NULL WHERE parent_session_id = ?", (session.id,))
        else:
            conn.execute("UPDATE sessions SET parent_session_id = ? WHERE parent_session_id = ?",
                         (session.parent_session_id, session.id))
        count = conn.execute("SELECT count(*) FROM messages WHERE session_id = ?",
                             (session.id,)).fetchone()[0]
        grams.unindex_session(conn, session.id)
        conn.execute("DELETE FROM sessions WHERE id = ?", (session.id,))
        return int(count)

    def end_session(self, session_id: str, reason: str) -> None:
        with self.db.write() as conn:
            self._session(conn, session_id)
            conn.execute("UPDATE sessions SET ended_at = ?, end_reason = ? WHERE id = ?",
                         (time.time(), reason, session_id))

    def add_usage(self, session_id: str, *, input_tokens: int = 0, output_tokens: int = 0,
                  cache_read_tokens: int = 0, cost_usd: float = 0.0,
                  model: str | None = None) -> None:
        with self.db.write() as conn:
            self._session(conn, session_id)
            add_usage_in(conn, session_id, Usage(input_tokens, output_tokens, cache_read_tokens,
                                               cost_usd, model))

    # -- lineage -------------------------------------------------------------------------
    def ancestors(self, session_id: str) -> list[Session]:
        """The chain of parents, nearest first (the session itself is not included)."""
        with self.db.read() as conn:
            self._session(conn, session_id)
            rows = conn.execute(
                f"""WITH RECURSIVE chain(id, depth) AS (
                        SELECT parent_session_id, 1 FROM sessions WHERE id = ?
                        UNION ALL
                        SELECT s.parent_session_id, chain.depth + 1
                        FROM sessions s JOIN chain ON s.id = chain.id
                        WHERE chain.depth < 10000)
                    SELECT {', '.join('s.' + c.strip() for c in SESSION_COLUMNS.split(','))}
                    FROM chain JOIN sessions s ON s.id = chain.id ORDER BY chain.depth""",
                (session_id,)).fetchall()
            return [to_session(r) for r in rows]

    def sessions_of_agent(self, agent: str, *, owner: str = "",
                          limit: int = 16) -> list[tuple[str, bool]]:
        """See ``Store.sessions_of_agent`` (the partial index ``events_agent``)."""
        with self.db.read() as conn:
            rows = conn.execute(
                "SELECT e.session_id, e.kind FROM events e JOIN sessions s ON s.id = e.session_id "
                "WHERE e.kind IN (?, ?, ?) AND e.payload = ? AND s.owner = ? "
                "ORDER BY e.id DESC LIMIT ?",
                (*AGENT_EVENTS, encode_json({"id": agent}), owner,
                 max(0, int(limit)))).fetchall()
        return [(str(r[0]), r[1] != AGENT_EVENT) for r in rows]

    def link_session(self, session_id: str, parent_session_id: str, link_kind: str) -> bool:
        if session_id == parent_session_id:
            return False
        with self.db.write() as conn:
            return conn.execute(
                "UPDATE sessions SET parent_session_id = ?, link_kind = ? WHERE id = ? "
                "AND parent_session_id IS NULL AND EXISTS (SELECT 1 FROM sessions WHERE id = ?)",
                (parent_session_id, link_kind, session_id, parent_session_id)).rowcount > 0

    def children(self, session_id: str) -> list[Session]:
        """Direct children, oldest first."""
        with self.db.read() as conn:
            self._session(conn, session_id)
            rows = conn.execute(
                f"SELECT {SESSION_COLUMNS} FROM sessions WHERE parent_session_id = ? "
                "ORDER BY started_at, rowid", (session_id,)).fetchall()
            return [to_session(r) for r in rows]

    def resolve_resume(self, session_id: str) -> Session:
        with self.db.read() as conn:
            current = self._session(conn, session_id)
            best = current
            seen = {current.id}
            while True:
                row = conn.execute(
                    f"SELECT {SESSION_COLUMNS} FROM sessions WHERE parent_session_id = ? "
                    "AND link_kind = 'compaction' ORDER BY started_at DESC, rowid DESC LIMIT 1",
                    (current.id,)).fetchone()
                if row is None or row[0] in seen:
                    return best
                current = to_session(row)
                seen.add(current.id)
                if current.message_count > 0:
                    best = current

    def next_lineage_title(self, title: str) -> str:
        clean = sanitize_title(title)
        if clean is None:
            raise InvalidInput("a session title cannot be empty")
        base, _ = split_lineage_title(clean)
        with self.db.read() as conn:
            return next_lineage_title(base, self._lineage_titles(conn, base))


def add_usage_in(conn: sqlite3.Connection, session_id: str, usage: Usage) -> None:
    """Add ``usage`` to the session's totals inside the caller's transaction."""
    conn.execute(
        "UPDATE sessions SET input_tokens = input_tokens + ?, "
        "output_tokens = output_tokens + ?, cache_read_tokens = cache_read_tokens + ?, "
        "cost_usd = cost_usd + ?, model = coalesce(?, model) WHERE id = ?",
        (int(usage.input_tokens), int(usage.output_tokens), int(usage.cache_read_tokens),
         float(usage.cost_usd), usage.model, session_id))
