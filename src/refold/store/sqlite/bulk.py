"""Bulk import on SQLite (``refold migrate``): whole sessions as they were.

Invariant: ``import_session`` writes a session with its messages, checkpoints and events in ONE
write transaction, or nothing; an id that exists already is left untouched (a re-run skips it).
The imported rows are indexed like any other (``indexer.py``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence

from refold.errors import NotFound
from refold.store.base import Checkpoint, Event, RewindRows, Session, StoredMessage
from refold.store.sqlite import indexer
from refold.store.sqlite.database import Database
from refold.store.sqlite.rows import encode_json, message_columns, to_rewind

_BATCH = 1000


class BulkOps:
    """Mixin: ``import_session``, ``list_rewinds`` and ``memory_documents``. Needs
    ``self.db``."""

    db: Database

    def import_session(self, session: Session, messages: Iterable[StoredMessage],
                       checkpoints: Sequence[Checkpoint], events: Sequence[Event],
                       rewinds: Sequence[RewindRows] = ()) -> bool:
        with self.db.write() as conn:
            if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session.id,)).fetchone():
                return False
            conn.execute(
                "INSERT INTO sessions (id, title, parent_session_id, link_kind, fork_seq, source, "
                "model, owner, started_at, ended_at, end_reason, input_tokens, output_tokens, "
                "cache_read_tokens, cost_usd) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (session.id, session.title, session.parent_session_id, session.link_kind,
                 session.fork_seq, session.source, session.model, session.owner,
                 session.started_at, session.ended_at, session.end_reason, session.input_tokens,
                 session.output_tokens, session.cache_read_tokens, session.cost_usd))
            count, top = 0, 0
            batch: list[tuple[object, ...]] = []
            for m in messages:
                role, body, text, tool_call_id, cjk = message_columns(m.message)
                batch.append((session.id, m.seq, role, body, text, tool_call_id, m.token_count,
                              m.created_at, 1 if m.active else 0, m.identity, cjk))
                count, top = count + 1, max(top, m.seq)
                if len(batch) >= _BATCH:
                    self._insert_rows(conn, batch)
                    batch = []
            self._insert_rows(conn, batch)
            conn.execute("UPDATE sessions SET message_count = ?, last_seq = ? WHERE id = ?",
                         (count, top, session.id))
            indexer.index_pending(conn)  # an import is bulk work: indexed in its own commit
            conn.executemany(
                "INSERT INTO checkpoints (session_id, summary, first_seq, last_seq, "
                "tail_start_seq, anchors, tokens_before, tokens_after, summarizer, status, "
                "summary_role, details, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(session.id, c.summary, c.first_seq, c.last_seq, c.tail_start_seq,
                  encode_json(list(c.anchors)), c.tokens_before, c.tokens_after, c.summarizer,
                  c.status, c.summary_role, encode_json(dict(c.details)), c.created_at)
                 for c in checkpoints])
            conn.executemany("INSERT INTO events (session_id, kind, payload, created_at) "
                             "VALUES (?, ?, ?, ?)",
                             [(session.id, e.kind, encode_json(e.payload), e.created_at)
                              for e in events])
            for rewind in rewinds:
                record = rewind.record
                cursor = conn.execute(
                    "INSERT INTO rewinds (session_id, from_seq, count, created_at, undone) "
                    "VALUES (?, ?, ?, ?, ?)", (session.id, record.from_seq, record.count,
                                               record.created_at, 1 if record.undone else 0))
                conn.executemany("UPDATE messages SET rewind_id = ? WHERE session_id = ? "
                                 "AND seq = ?", [(cursor.lastrowid, session.id, seq)
                                                 for seq in rewind.seqs])
            return True

    def list_rewinds(self, session_id: str) -> list[RewindRows]:
        with self.db.read() as conn:
            if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone() \
                    is None:
                raise NotFound(f"no session {session_id}")
            held: dict[int, list[int]] = {}
            for rewind_id, seq in conn.execute(
                    "SELECT rewind_id, seq FROM messages WHERE session_id = ? "
                    "AND rewind_id IS NOT NULL ORDER BY seq", (session_id,)):
                held.setdefault(int(rewind_id), []).append(int(seq))
            return [RewindRows(record, tuple(held.get(record.id, ())))
                    for record in map(to_rewind, conn.execute(
                        "SELECT id, session_id, from_seq, count, created_at, undone "
                        "FROM rewinds WHERE session_id = ? ORDER BY id", (session_id,)))]

    @staticmethod
    def _insert_rows(conn: sqlite3.Connection, rows: list[tuple[object, ...]]) -> None:
        if rows:
            conn.executemany(
                "INSERT INTO messages (session_id, seq, role, message, text, tool_call_id, "
                "token_count, created_at, active, identity, has_cjk) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)

    def memory_documents(self) -> list[tuple[str, str]]:
        with self.db.read() as conn:
            return [(r[0], r[1]) for r in conn.execute(
                "SELECT profile, target FROM memory ORDER BY profile, target")]
