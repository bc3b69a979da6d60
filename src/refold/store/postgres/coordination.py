"""Cross-host coordination on PostgreSQL: expiring leases and versioned memory documents.

Invariants:
- A lease is a row ``(name, holder, expires_at)`` judged by the database clock (``now()``), so
  hosts with skewed clocks agree. Taking it is one atomic upsert that succeeds only when the
  row is absent, expired, or already ours (then it is renewed); a crashed holder's lease simply
  expires. Rows survive connection pooling, unlike session-level advisory locks.
- ``memory_save`` is compare-and-swap on ``version``: the write lands only if the stored version
  is still ``expected_version`` (0: no document yet), else Conflict, so two hosts editing
  MEMORY.md at once never silently overwrite each other.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from refold.errors import Conflict, InvalidInput
from refold.store.base import MemoryRow
from refold.store.postgres.codec import decode_json, encode_json
from refold.store.postgres.core import PgCore


class CoordinationMixin(PgCore):
    def acquire_lease(self, name: str, holder: str, ttl_seconds: float) -> bool:
        if ttl_seconds <= 0:
            raise InvalidInput("a lease needs a positive ttl")
        with self._tx("acquire lease") as cur:
            cur.execute("""INSERT INTO leases (name, holder, expires_at)
                           VALUES (%s, %s, now() + make_interval(secs => %s))
                           ON CONFLICT (name) DO UPDATE
                               SET holder = excluded.holder, expires_at = excluded.expires_at
                               WHERE leases.holder = excluded.holder
                                  OR leases.expires_at <= now()
                           RETURNING holder""", (name, holder, float(ttl_seconds)))
            return cur.fetchone() is not None

    def release_lease(self, name: str, holder: str) -> None:
        with self._tx("release lease") as cur:
            cur.execute("DELETE FROM leases WHERE name = %s AND holder = %s", (name, holder))

    def memory_load(self, profile: str, target: str) -> tuple[list[MemoryRow], int]:
        with self._tx("load memory") as cur:
            cur.execute("SELECT rows_json, version FROM memory_docs "
                        "WHERE profile = %s AND target = %s", (profile, target))
            row = cur.fetchone()
        if row is None:
            return [], 0
        rows = [MemoryRow(text=r["text"], created_at=r["created_at"], updated_at=r["updated_at"])
                for r in decode_json(row[0])]
        return rows, int(row[1])

    def memory_save(self, profile: str, target: str, rows: Sequence[MemoryRow],
                    expected_version: int) -> int:
        payload = encode_json([{"text": r.text, "created_at": r.created_at,
                                "updated_at": r.updated_at} for r in rows])
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
