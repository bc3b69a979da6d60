"""Checkpoints and the model view, task events, leases and DB-backed memory on SQLite.

Invariants:
- A checkpoint satisfies ``1 <= first_seq <= last_seq < tail_start_seq``; it never touches a
  message row.
- ``projection`` reads the latest checkpoint by index and then only the active rows from its
  ``tail_start_seq`` on (an index range on (session_id, seq)): its cost follows the tail, never
  the archive before it.
- A lease is held by one holder until it expires, is released, or the process that took it is
  gone (its row names host, pid and start time; see ``liveness``); the same holder re-acquiring
  extends it.
- ``memory_save`` is a compare-and-swap on ``version`` (0 = nothing stored yet): a moved version
  raises Conflict and writes nothing.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from refold.errors import Conflict, InvalidInput
from refold.store.base import (
    Checkpoint,
    CheckpointBase,
    CheckpointDraft,
    Event,
    MemoryRow,
    Projection,
    ViewTip,
)
from refold.store.rules import check_checkpoint_commit, check_checkpoint_draft
from refold.store.sqlite import liveness
from refold.store.sqlite.ledger import LedgerOps
from refold.store.sqlite.rows import (
    CHECKPOINT_COLUMNS,
    MESSAGE_COLUMNS,
    encode_json,
    to_checkpoint,
    to_event,
    to_message,
)


class StateOps(LedgerOps):
    """Mixin: checkpoints, projection, events, leases, memory."""

    def add_checkpoint(self, session_id: str, draft: CheckpointDraft, *,
                       expect: CheckpointBase | None = None) -> Checkpoint:
        check_checkpoint_draft(draft)
        with self.db.write() as conn:  # BEGIN IMMEDIATE: the check and the insert are one step
            self._session(conn, session_id)
            latest = conn.execute(f"SELECT {CHECKPOINT_COLUMNS} FROM checkpoints "
                                  "WHERE session_id = ? ORDER BY id DESC LIMIT 1",
                                  (session_id,)).fetchone()
            tip = conn.execute("SELECT active FROM messages WHERE session_id = ? AND seq = ?",
                               (session_id, expect.tip_seq)).fetchone() \
                if expect is not None and expect.tip_seq is not None else None
            check_checkpoint_commit(session_id, draft, to_checkpoint(latest) if latest else None,
                                    expect, tip is not None and bool(tip[0]))
            cursor = conn.execute(
                "INSERT INTO checkpoints (session_id, summary, first_seq, last_seq, "
                "tail_start_seq, anchors, tokens_before, tokens_after, summarizer, status, "
                "summary_role, details, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (session_id, draft.summary, draft.first_seq, draft.last_seq, draft.tail_start_seq,
                 encode_json(list(draft.anchors)), draft.tokens_before, draft.tokens_after,
                 draft.summarizer, draft.status, draft.summary_role,
                 encode_json(dict(draft.details)), time.time()))
            row = conn.execute(f"SELECT {CHECKPOINT_COLUMNS} FROM checkpoints WHERE id = ?",
                               (cursor.lastrowid,)).fetchone()
            return to_checkpoint(row)

    def latest_checkpoint(self, session_id: str) -> Checkpoint | None:
        with self.db.read() as conn:
            self._session(conn, session_id)
            row = conn.execute(f"SELECT {CHECKPOINT_COLUMNS} FROM checkpoints WHERE session_id = ? "
                               "ORDER BY id DESC LIMIT 1", (session_id,)).fetchone()
            return to_checkpoint(row) if row else None

    def list_checkpoints(self, session_id: str) -> list[Checkpoint]:
        with self.db.read() as conn:
            self._session(conn, session_id)
            rows = conn.execute(f"SELECT {CHECKPOINT_COLUMNS} FROM checkpoints "
                                "WHERE session_id = ? ORDER BY id", (session_id,)).fetchall()
            return [to_checkpoint(r) for r in rows]

    def projection(self, session_id: str) -> Projection:
        with self.db.read() as conn:
            checkpoint = self.latest_checkpoint(session_id)
            start = checkpoint.tail_start_seq if checkpoint else 0
            rows = conn.execute(f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = ? "
                                "AND seq >= ? AND active = 1 ORDER BY seq",
                                (session_id, start)).fetchall()
            return Projection(session_id, checkpoint, [to_message(r) for r in rows])

    def view_tip(self, session_id: str) -> ViewTip:
        """The last active row and the latest checkpoint id: two index lookups, one snapshot."""
        with self.db.read() as conn:
            self._session(conn, session_id)
            row = conn.execute(
                "SELECT (SELECT seq FROM messages WHERE session_id = ?1 AND active = 1 "
                "ORDER BY seq DESC LIMIT 1), (SELECT identity FROM messages WHERE session_id = ?1 "
                "AND active = 1 ORDER BY seq DESC LIMIT 1), (SELECT id FROM checkpoints "
                "WHERE session_id = ?1 ORDER BY id DESC LIMIT 1)", (session_id,)).fetchone()
            return ViewTip(row[0], row[1], row[2])

    # -- events ----------------------------------------------------------------------------
    def append_event(self, session_id: str, kind: str, payload: dict[str, Any]) -> Event:
        if not isinstance(kind, str) or not kind:
            raise InvalidInput("an event kind must be a non-empty string")
        body = encode_json(payload)
        with self.db.write() as conn:
            self._session(conn, session_id)
            now = time.time()
            cursor = conn.execute("INSERT INTO events (session_id, kind, payload, created_at) "
                                  "VALUES (?, ?, ?, ?)", (session_id, kind, body, now))
            return Event(int(cursor.lastrowid or 0), session_id, kind, json.loads(body), now)

    def list_events(self, session_id: str, kind: str | None = None, *,
                    after_id: int = 0) -> list[Event]:
        sql = ("SELECT id, session_id, kind, payload, created_at FROM events "
               "WHERE session_id = ? AND id > ?")
        args: list[object] = [session_id, after_id]
        if kind is not None:
            sql += " AND kind = ?"
            args.append(kind)
        with self.db.read() as conn:
            self._session(conn, session_id)
            return [to_event(r) for r in conn.execute(sql + " ORDER BY id", args)]

    # -- leases ----------------------------------------------------------------------------
    def acquire_lease(self, name: str, holder: str, ttl_seconds: float) -> bool:
        """Take or renew ``name``: free, expired, ours, or its holder's process is gone."""
        if ttl_seconds <= 0:
            raise InvalidInput("a lease needs a positive ttl")
        host, pid, started = liveness.me()
        with self.db.write() as conn:
            now = time.time()
            row = conn.execute("SELECT holder, expires_at, host, pid, pid_started FROM leases "
                               "WHERE name = ?", (name,)).fetchone()
            if row is not None and row[0] != holder and row[1] > now \
                    and liveness.alive(row[2], row[3], row[4]):
                return False
            conn.execute("INSERT INTO leases (name, holder, expires_at, host, pid, pid_started) "
                         "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET "
                         "holder = excluded.holder, expires_at = excluded.expires_at, "
                         "host = excluded.host, pid = excluded.pid, "
                         "pid_started = excluded.pid_started",
                         (name, holder, now + ttl_seconds, host, pid, started))
            return True

    def release_lease(self, name: str, holder: str) -> None:
        with self.db.write() as conn:
            conn.execute("DELETE FROM leases WHERE name = ? AND holder = ?", (name, holder))

    # -- memory ----------------------------------------------------------------------------
    def memory_load(self, profile: str, target: str) -> tuple[list[MemoryRow], int]:
        with self.db.read() as conn:
            row = conn.execute("SELECT rows, version FROM memory WHERE profile = ? AND target = ?",
                               (profile, target)).fetchone()
        if row is None:
            return [], 0
        rows = [MemoryRow(str(r["text"]), float(r["created_at"]), float(r["updated_at"]),
                          float(r.get("last_used_at") or 0.0))
                for r in json.loads(row[0])]
        return rows, int(row[1])

    def memory_save(self, profile: str, target: str, rows: Sequence[MemoryRow],
                    expected_version: int) -> int:
        body = encode_json([{"text": r.text, "created_at": r.created_at,
                             "updated_at": r.updated_at, "last_used_at": r.last_used_at}
                            for r in rows])
        with self.db.write() as conn:
            row = conn.execute("SELECT version FROM memory WHERE profile = ? AND target = ?",
                               (profile, target)).fetchone()
            current = int(row[0]) if row else 0
            if current != expected_version:
                raise Conflict(f"memory {profile}/{target} changed (version {current}, expected "
                               f"{expected_version})", hint="reload and retry")
            conn.execute("INSERT INTO memory (profile, target, version, rows, updated_at) "
                         "VALUES (?, ?, ?, ?, ?) ON CONFLICT (profile, target) DO UPDATE SET "
                         "version = excluded.version, rows = excluded.rows, "
                         "updated_at = excluded.updated_at",
                         (profile, target, current + 1, body, time.time()))
            return current + 1
