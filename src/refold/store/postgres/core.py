"""The shared core of the PostgreSQL store: pool, transactions, and row -> record conversion.

Every public store method runs in exactly one transaction taken from the pool (``_tx``), wrapped
in ``translate_errors`` so callers only ever see refold errors. Rows come back as tuples in the
column orders below; the ``*_from_row`` functions are the one place they become records.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import psycopg_pool
from psycopg import sql

from refold.errors import InvalidInput, NotFound
from refold.store.base import Checkpoint, Event, Session, StoredMessage
from refold.store.postgres.codec import decode_json
from refold.store.postgres.connection import (
    check_schema_name,
    connect,
    make_pool,
    split_url,
    translate_errors,
    with_schema,
)
from refold.store.postgres.schema import (
    LATEST_VERSION,
    extension_schemas,
    holds_refold,
    migrate,
)
from refold.store.urls import redact_url

log = logging.getLogger(__name__)

Cursor = psycopg.Cursor[tuple[Any, ...]]

SESSION_COLS = ("id, title, parent_session_id, link_kind, source, model, owner, started_at, "
                "ended_at, end_reason, message_count, input_tokens, output_tokens, "
                "cache_read_tokens, cost_usd, fork_seq")
MESSAGE_COLS = "session_id, seq, body, identity, token_count, created_at, active"
CHECKPOINT_COLS = ("id, session_id, summary_json, first_seq, last_seq, tail_start_seq, "
                   "anchors_json, tokens_before, tokens_after, summarizer, status, summary_role, "
                   "details_json, created_at")


def session_from_row(row: tuple[Any, ...]) -> Session:
    return Session(
        id=row[0], title=row[1], parent_session_id=row[2], link_kind=row[3], source=row[4],
        model=row[5], owner=row[6], started_at=row[7], ended_at=row[8], end_reason=row[9],
        message_count=row[10], input_tokens=row[11], output_tokens=row[12],
        cache_read_tokens=row[13], cost_usd=row[14], fork_seq=row[15])


def message_from_row(row: tuple[Any, ...]) -> StoredMessage:
    return StoredMessage(session_id=row[0], seq=row[1], message=decode_json(row[2]),
                         identity=row[3], token_count=row[4], created_at=row[5], active=row[6])


def checkpoint_from_row(row: tuple[Any, ...]) -> Checkpoint:
    return Checkpoint(
        id=row[0], session_id=row[1], summary=decode_json(row[2]), first_seq=row[3],
        last_seq=row[4], tail_start_seq=row[5], anchors=decode_json(row[6]),
        tokens_before=row[7], tokens_after=row[8], summarizer=row[9], status=row[10],
        summary_role=row[11], details=decode_json(row[12]), created_at=row[13])


def event_from_row(row: tuple[Any, ...]) -> Event:
    return Event(id=row[0], session_id=row[1], kind=row[2], payload=decode_json(row[3]),
                 created_at=row[4])


DEFAULT_SCHEMA = "refold"


def _installed(conn: psycopg.Connection[Any], schema: str) -> bool:
    """Whether ``schema`` holds refold's own tables: another app's ``schema_migrations``
    (Rails, golang-migrate, Ecto) in ``public`` is not an earlier refold install."""
    return holds_refold(conn, schema)


def default_schema(conn: psycopg.Connection[Any]) -> str:
    """The schema a URL without ``?schema=`` means: ``public`` where an earlier refold installed
    itself there (it keeps working), else refold's own ``refold`` schema, so a new install never
    mixes generic table names (``sessions``, ``messages``) into a database's public schema."""
    return "public" if _installed(conn, "public") else DEFAULT_SCHEMA


def require_installed(conn: psycopg.Connection[Any], schema: str, where: str) -> None:
    """NotFound unless ``schema`` holds a refold store (read commands never create one)."""
    if not _installed(conn, schema):
        raise NotFound(f"no refold data in schema {schema!r} at {where}",
                       hint="check ?schema= in --db / REFOLD_DB; `refold import FILE` creates it")


class PgCore:
    """Pool, schema and transactions; the mixins that make up ``PostgresStore`` build on it."""

    url: str

    def __init__(self, url: str, *, schema: str | None = None, create: bool = True,
                 min_size: int = 1, max_size: int = 10, timeout: float = 10.0) -> None:
        conninfo, url_schema = split_url(url)
        self._conninfo = conninfo
        with connect(conninfo, timeout=timeout) as conn, translate_errors("cannot open schema"):
            self.schema = check_schema_name(schema or url_schema or default_schema(conn))
            if not create:
                require_installed(conn, self.schema, redact_url(url))
            self._search_path = [self.schema] + [
                ext for ext in extension_schemas(conn) if ext != self.schema]
            self.applied_migrations = migrate(conn, self.schema, self._search_path)
        self.url = with_schema(url, self.schema)
        self._pool: psycopg_pool.ConnectionPool = make_pool(
            conninfo, self._search_path, min_size=min_size, max_size=max_size, timeout=timeout)

    # -- transactions -----------------------------------------------------------------------
    @contextmanager
    def _tx(self, action: str) -> Iterator[Cursor]:
        """One transaction: commit on success, roll back on any error (translated)."""
        with translate_errors(action), self._pool.connection() as conn, conn.cursor() as cur:
            yield cur

    def _require_session(self, cur: Cursor, session_id: str, *, lock: bool = False) -> None:
        """Raise NotFound unless the session exists; ``lock`` serializes writers per session."""
        suffix = " FOR NO KEY UPDATE" if lock else ""
        cur.execute("SELECT 1 FROM sessions WHERE id = %s" + suffix, (session_id,))
        if cur.fetchone() is None:
            raise NotFound(f"no session {session_id!r}",
                           hint="`refold sessions list` shows the sessions")

    def _load_session(self, cur: Cursor, session_id: str, *, lock: bool = False) -> Session:
        suffix = " FOR NO KEY UPDATE" if lock else ""
        cur.execute(f"SELECT {SESSION_COLS} FROM sessions WHERE id = %s" + suffix, (session_id,))
        row = cur.fetchone()
        if row is None:
            raise NotFound(f"no session {session_id!r}",
                           hint="`refold sessions list` shows the sessions")
        return session_from_row(row)

    # -- maintenance ------------------------------------------------------------------------
    def integrity_check(self) -> list[str]:
        problems: list[str] = []
        with self._tx("integrity check") as cur:
            cur.execute("SELECT coalesce(max(version), 0) FROM schema_migrations")
            row = cur.fetchone()
            if row is None or row[0] != LATEST_VERSION:
                problems.append(f"schema version {row[0] if row else None} != {LATEST_VERSION}")
            cur.execute("""SELECT s.id, s.message_count, count(m.id) FROM sessions s
                           LEFT JOIN messages m ON m.session_id = s.id
                           GROUP BY s.id HAVING s.message_count <> count(m.id)""")
            for sid, counted, actual in cur.fetchall():
                problems.append(f"session {sid}: message_count {counted} != {actual} rows")
            cur.execute("""SELECT c.session_id, c.id FROM checkpoints c
                           WHERE c.first_seq > c.last_seq OR c.last_seq >= c.tail_start_seq""")
            for sid, cid in cur.fetchall():
                problems.append(f"session {sid}: checkpoint {cid} has an invalid seq range")
        return problems

    def rebuild_search_indexes(self) -> None:
        """Rebuild the message indexes (GIN word and trigram indexes included) and recount
        every session's ``message_count`` from its rows. Nothing is lost: both derive from
        the stored messages."""
        with self._tx("rebuild search indexes") as cur:
            cur.execute("REINDEX TABLE messages")
            cur.execute("""UPDATE sessions s SET message_count = c.n
                           FROM (SELECT s2.id, count(m.id) AS n FROM sessions s2
                                 LEFT JOIN messages m ON m.session_id = s2.id
                                 GROUP BY s2.id) c
                           WHERE s.id = c.id AND s.message_count <> c.n""")
        log.info("search indexes rebuilt for schema %s", self.schema)

    def backup(self, destination: str) -> None:
        raise InvalidInput("refold does not back up PostgreSQL itself",
                           hint="use pg_dump; the repair only rebuilds derived data")

    def info(self) -> dict[str, Any]:
        with self._tx("read store info") as cur:
            cur.execute("SELECT current_setting('server_version'), "
                        "(SELECT coalesce(max(version), 0) FROM schema_migrations), "
                        "(SELECT count(*) FROM sessions), (SELECT count(*) FROM messages), "
                        "(SELECT count(*) FROM checkpoints), (SELECT count(*) FROM events)")
            row = cur.fetchone()
        assert row is not None
        return {"backend": "postgresql", "url": redact_url(self.url), "schema": self.schema,
                "server_version": row[0], "schema_version": row[1],
                "schema_latest": LATEST_VERSION, "sessions": row[2], "messages": row[3],
                "checkpoints": row[4], "events": row[5]}

    def drop_schema(self) -> None:
        """Drop this store's schema and everything in it (tests use a throwaway schema)."""
        if self.schema == "public":
            raise InvalidInput("refusing to drop the public schema",
                               hint="drop_schema is for stores opened with schema=…")
        with self._tx("drop schema") as cur:
            cur.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                sql.Identifier(self.schema)))

    def close(self) -> None:
        self._pool.close()

    def __enter__(self) -> PgCore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
