"""Cross-host coordination on PostgreSQL: expiring leases and versioned memory documents.

Invariants:
- A lease is a row ``(name, holder, expires_at, backend_pid, backend_start)`` judged by the
  database clock (``now()``), so hosts with skewed clocks agree. It is taken on the store's own
  lease connection (outside the pool, open while the store is), and the row names that
  connection's backend. Taking it is one atomic upsert that succeeds only when the row is
  absent, expired, already ours (then it is renewed), or its backend is gone from
  ``pg_stat_activity``: a killed holder's connection closes, and its lease lapses at once
  instead of blocking everyone for the ttl. (Where another role's backend start is hidden, its
  pid alone tells.) Rows survive connection pooling, unlike session-level advisory locks.
- ``memory_save`` is compare-and-swap on ``version``: the write lands only if the stored version
  is still ``expected_version`` (0: no document yet), else Conflict, so two hosts editing
  MEMORY.md at once never silently overwrite each other.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql

from refold.errors import Conflict, InvalidInput
from refold.store.base import MemoryRow
from refold.store.postgres.codec import decode_json, encode_json
from refold.store.postgres.connection import translate_errors
from refold.store.postgres.core import PgCore

_TAKE_LEASE = """
    INSERT INTO leases (name, holder, expires_at, backend_pid, backend_start)
    VALUES (%(name)s, %(holder)s, now() + make_interval(secs => %(ttl)s), pg_backend_pid(),
            %(started)s)
    ON CONFLICT (name) DO UPDATE
        SET holder = excluded.holder, expires_at = excluded.expires_at,
            backend_pid = excluded.backend_pid, backend_start = excluded.backend_start
        WHERE leases.holder = excluded.holder
           OR leases.expires_at <= now()
           OR (leases.backend_pid IS NOT NULL AND NOT EXISTS (
                SELECT 1 FROM pg_stat_activity a WHERE a.pid = leases.backend_pid
                AND (a.backend_start IS NULL OR a.backend_start = leases.backend_start)))
    RETURNING holder"""


class CoordinationMixin(PgCore):
    _lease_guard = threading.Lock()  # one lease statement at a time on the lease connection
    _lease_conn: psycopg.Connection[Any] | None = None
    _lease_backend_start: Any = None  # pg_stat_activity.backend_start of the lease connection

    def acquire_lease(self, name: str, holder: str, ttl_seconds: float) -> bool:
        if ttl_seconds <= 0:
            raise InvalidInput("a lease needs a positive ttl")
        with self._lease_guard, translate_errors("acquire lease"):
            conn = self._lease_connection()
            row = conn.execute(_TAKE_LEASE, {"name": name, "holder": holder,
                                             "ttl": float(ttl_seconds),
                                             "started": self._lease_backend_start}).fetchone()
            return row is not None

    def _lease_connection(self) -> psycopg.Connection[Any]:
        """The store's own autocommit connection for taking leases (reopened if it broke: the
        leases taken on the old one lapse with it, as they would with a crashed process)."""
        conn = self._lease_conn
        if conn is None or conn.closed or conn.broken:
            conn = psycopg.connect(self._conninfo, autocommit=True, connect_timeout=10)
            conn.execute(sql.SQL("SET search_path TO {}").format(
                sql.SQL(", ").join(sql.Identifier(s) for s in self._search_path)))
            # this backend's start, read once in a statement of its own: read inside the lease
            # statement, it fixed that statement's view of pg_stat_activity (one snapshot a
            # transaction) before waiting on a rival's new lease, whose backend it then did not
            # see — and took the lease as lapsed (two holders, seen under load)
            found = conn.execute("SELECT backend_start FROM pg_stat_activity "
                                 "WHERE pid = pg_backend_pid()").fetchone()
            self._lease_backend_start = found[0] if found else None
            self._lease_conn = conn
        return conn

    def release_lease(self, name: str, holder: str) -> None:
        with self._tx("release lease") as cur:
            cur.execute("DELETE FROM leases WHERE name = %s AND holder = %s", (name, holder))

    def close(self) -> None:
        with self._lease_guard:
            conn, self._lease_conn = self._lease_conn, None
        if conn is not None:
            conn.close()  # its backend ends: leases still held by this store lapse
        super().close()

    def memory_load(self, profile: str, target: str) -> tuple[list[MemoryRow], int]:
        with self._tx("load memory") as cur:
            cur.execute("SELECT rows_json, version FROM memory_docs "
                        "WHERE profile = %s AND target = %s", (profile, target))
            row = cur.fetchone()
        if row is None:
            return [], 0
        rows = [MemoryRow(text=r["text"], created_at=r["created_at"], updated_at=r["updated_at"],
                          last_used_at=float(r.get("last_used_at") or 0.0))
                for r in decode_json(row[0])]
        return rows, int(row[1])

    def memory_save(self, profile: str, target: str, rows: Sequence[MemoryRow],
                    expected_version: int) -> int:
        payload = encode_json([{"text": r.text, "created_at": r.created_at,
                                "updated_at": r.updated_at, "last_used_at": r.last_used_at}
                               for r in rows])
        now = time.time()
        with self._tx("save memory") as cur:
            if expected_version == 0:
                cur.execute("""INSERT INTO memory_docs (profile, target, version, rows_json,
                                    updated_at) VALUES (%s, %s, 1, %s, %s)
                               ON CONFLICT (profile, target) DO NOTHING RETURNING version""",
                            (profile, target, payload, now))
            else:
                cur.execute("""UPDATE memory_docs SET version = version + 1, rows_json = %s,
                                    updated_at = %s
                               WHERE profile = %s AND target = %s AND version = %s
                               RETURNING version""",
                            (payload, now, profile, target, expected_version))
            row = cur.fetchone()
            if row is None:
                cur.execute("SELECT version FROM memory_docs WHERE profile = %s AND target = %s",
                            (profile, target))
                current = cur.fetchone()
                raise Conflict(f"memory {profile}/{target} changed underneath (version "
                               f"{current[0] if current else 0}, expected {expected_version})",
                               hint="reload and apply the change again")
        return int(row[0])
