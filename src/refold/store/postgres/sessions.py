"""Sessions on PostgreSQL: create, resolve, list, rename, counters, lineage and pruning.

Lineage queries are recursive CTEs, so ancestors and descendants cost one round trip however deep
the chain. Titles are sanitized and numbered by ``refold.store.titles`` (shared with SQLite);
uniqueness is enforced by a unique index, so two hosts cannot both take "name #3".
"""

from __future__ import annotations

import time
import uuid

from refold.errors import AmbiguousReference, Conflict, InvalidInput, NotFound
from refold.store.base import Session
from refold.store.postgres.core import SESSION_COLS, Cursor, PgCore, session_from_row
from refold.store.titles import (
    latest_lineage_title,
    like_escape,
    sanitize_title,
    split_lineage_title,
)
from refold.store.titles import next_lineage_title as next_title_from

LINK_KINDS = ("compaction", "branch", "fork")


def new_session_id() -> str:
    return time.strftime("%Y%m%d_%H%M%S_", time.gmtime()) + uuid.uuid4().hex[:8]


class SessionsMixin(PgCore):
    def create_session(self, *, title: str | None = None, source: str | None = None,
                       model: str | None = None, parent_session_id: str | None = None,
                       link_kind: str | None = None, owner: str = "",
                       session_id: str | None = None) -> Session:
        if link_kind is not None and link_kind not in LINK_KINDS:
            raise InvalidInput(f"unknown link kind {link_kind!r}",
                               hint="use one of: " + ", ".join(LINK_KINDS))
        sid = session_id or new_session_id()
        with self._tx("create session") as cur:
            if parent_session_id is not None:
                self._require_session(cur, parent_session_id)
            clean = sanitize_title(title)
            if clean is not None:
                self._check_title_free(cur, clean)
            cur.execute(f"""INSERT INTO sessions (id, title, parent_session_id, link_kind, source,
                                model, owner, started_at)
                            VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
                            ON CONFLICT (id) DO NOTHING RETURNING {SESSION_COLS}""",
                        (sid, clean, parent_session_id, link_kind if parent_session_id else None,
                         source, model, owner, time.time()))
            row = cur.fetchone()
            if row is None:
                raise Conflict(f"session {sid!r} already exists")
        return session_from_row(row)

    def _check_title_free(self, cur: Cursor, title: str, except_id: str | None = None) -> None:
        cur.execute("SELECT id FROM sessions WHERE title = %s", (title,))
        row = cur.fetchone()
        if row is not None and row[0] != except_id:
            raise Conflict(f"the title {title!r} is already used by session {row[0]}",
                           hint="pick another title")

    def get_session(self, session_id: str) -> Session:
        with self._tx("read session") as cur:
            return self._load_session(cur, session_id)

    def resolve_session(self, ref: str, *, owner: str | None = None) -> Session:
        """Exact id, then unique id prefix, then title (its latest numbered variant)."""
        ref = ref.strip()
        if not ref:
            raise InvalidInput("empty session reference", hint="give an id, id prefix or title")
        owner_sql, owner_args = ("", ()) if owner is None else (" AND owner = %s", (owner,))
        with self._tx("resolve session") as cur:
            cur.execute(f"SELECT {SESSION_COLS} FROM sessions WHERE id = %s{owner_sql}",
                        (ref, *owner_args))
            row = cur.fetchone()
            if row is not None:
                return session_from_row(row)
            cur.execute(f"""SELECT {SESSION_COLS} FROM sessions
                            WHERE id LIKE %s ESCAPE '\\'{owner_sql} ORDER BY id LIMIT 11""",
                        (like_escape(ref) + "%", *owner_args))
            rows = cur.fetchall()
            if len(rows) == 1:
                return session_from_row(rows[0])
            if len(rows) > 1:
                ids = [r[0] for r in rows]
                raise AmbiguousReference(f"{ref!r} matches {len(ids)} sessions",
                                         candidates=ids, hint="give more of the id")
            found = self._resolve_title(cur, ref, owner_sql, owner_args)
        if found is None:
            raise NotFound(f"no session matches {ref!r}",
                           hint="list sessions with `refold sessions list`")
        return found

    def _resolve_title(self, cur: Cursor, ref: str, owner_sql: str,
                       owner_args: tuple[str, ...]) -> Session | None:
        clean = sanitize_title(ref)
        if clean is None:
            return None
        base, _ = split_lineage_title(clean)
        titles = self._lineage_titles(cur, base)
        target = clean if clean in titles and clean != base else latest_lineage_title(base, titles)
        if target is None:
            return None
        cur.execute(f"SELECT {SESSION_COLS} FROM sessions WHERE title = %s{owner_sql}",
                    (target, *owner_args))
        row = cur.fetchone()
        return session_from_row(row) if row else None

    def _lineage_titles(self, cur: Cursor, base: str) -> list[str]:
        cur.execute("SELECT title FROM sessions WHERE title = %s OR title LIKE %s ESCAPE '\\'",
                    (base, like_escape(base + " #") + "%"))
        return [r[0] for r in cur.fetchall()]

    def next_lineage_title(self, title: str) -> str:
        clean = sanitize_title(title)
        if clean is None:
            raise InvalidInput("empty session title")
        base, _ = split_lineage_title(clean)
        with self._tx("number title") as cur:
            return next_title_from(clean, self._lineage_titles(cur, base))

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
            self._require_session(cur, session_id)
            self._check_title_free(cur, clean, except_id=session_id)
            cur.execute(f"UPDATE sessions SET title = %s WHERE id = %s RETURNING {SESSION_COLS}",
                        (clean, session_id))
            row = cur.fetchone()
        assert row is not None
        return session_from_row(row)

    def delete_session(self, session_id: str) -> int:
        with self._tx("delete session") as cur:
            self._require_session(cur, session_id, lock=True)
            cur.execute("DELETE FROM messages WHERE session_id = %s", (session_id,))
            removed = cur.rowcount
            cur.execute("DELETE FROM sessions WHERE id = %s", (session_id,))
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
            cur.execute("""UPDATE sessions SET input_tokens = input_tokens + %s,
                                output_tokens = output_tokens + %s,
                                cache_read_tokens = cache_read_tokens + %s,
                                cost_usd = cost_usd + %s, model = coalesce(%s, model)
                            WHERE id = %s""",
                        (input_tokens, output_tokens, cache_read_tokens, cost_usd, model,
                         session_id))
            if cur.rowcount == 0:
                raise NotFound(f"no session {session_id!r}")

    def prune_sessions(self, older_than_days: float) -> int:
        if older_than_days < 0:
            raise InvalidInput("older_than_days must not be negative")
        cutoff = time.time() - older_than_days * 86400
        with self._tx("prune sessions") as cur:
            cur.execute("DELETE FROM sessions WHERE ended_at IS NOT NULL AND ended_at < %s",
                        (cutoff,))
            return cur.rowcount

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

    def children(self, session_id: str) -> list[Session]:
        with self._tx("read children") as cur:
            self._require_session(cur, session_id)
            cur.execute(f"""SELECT {SESSION_COLS} FROM sessions WHERE parent_session_id = %s
                            ORDER BY started_at, id""", (session_id,))
            return [session_from_row(r) for r in cur.fetchall()]

    def resolve_resume(self, session_id: str) -> Session:
        """The latest descendant with messages: newest child first, deepest wins."""
        with self._tx("resolve resume") as cur:
            start = self._load_session(cur, session_id)
            cur.execute(f"""WITH RECURSIVE down(id, depth, path) AS (
                                SELECT id, 0, ARRAY[]::float8[] FROM sessions WHERE id = %s
                                UNION ALL
                                SELECT s.id, down.depth + 1, down.path || s.started_at
                                FROM sessions s JOIN down ON s.parent_session_id = down.id
                                WHERE down.depth < 10000)
                            SELECT {', '.join('s.' + c for c in SESSION_COLS.split(', '))}
                            FROM down JOIN sessions s ON s.id = down.id
                            WHERE s.message_count > 0
                            ORDER BY down.depth DESC, down.path DESC LIMIT 1""", (session_id,))
            row = cur.fetchone()
        return session_from_row(row) if row else start
