"""Bulk import on PostgreSQL (``refold migrate``): whole sessions as they were, via COPY.

Invariant: ``import_session`` writes a session with its messages, checkpoints and events in ONE
transaction, or nothing; an id that exists already is left untouched (so a re-run skips it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from refold.errors import Conflict, NotFound
from refold.messages.model import searchable_text
from refold.store.base import Checkpoint, Event, RewindRows, Session, StoredMessage
from refold.store.postgres.codec import cjk_gram_list, clean_text, encode_json
from refold.store.postgres.core import PgCore
from refold.store.postgres.ledger import REWIND_COLS, _rewind_from_row


class BulkMixin(PgCore):
    def import_session(self, session: Session, messages: Iterable[StoredMessage],
                       checkpoints: Sequence[Checkpoint], events: Sequence[Event],
                       rewinds: Sequence[RewindRows] = ()) -> bool:
        with self._tx("import session") as cur:
            if session.title is not None:
                cur.execute("SELECT id FROM sessions WHERE owner = %s AND title = %s "
                            "AND id <> %s", (session.owner, session.title, session.id))
                taken = cur.fetchone()
                if taken is not None:
                    raise Conflict(f"cannot import session {session.id}: its title "
                                   f"{session.title!r} is used by session {taken[0]} here",
                                   hint="rename one of the two sessions and run again")
            cur.execute("""INSERT INTO sessions (id, title, parent_session_id, link_kind, source,
                                model, owner, started_at, ended_at, end_reason, message_count,
                                input_tokens, output_tokens, cache_read_tokens, cost_usd,
                                fork_seq)
                           VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, 0, %s, %s, %s, %s, %s)
                           ON CONFLICT (id) DO NOTHING RETURNING id""",
                        (session.id, session.title, session.parent_session_id, session.link_kind,
                         session.source, session.model, session.owner, session.started_at,
                         session.ended_at, session.end_reason, session.input_tokens,
                         session.output_tokens, session.cache_read_tokens, session.cost_usd,
                         session.fork_seq))
            if cur.fetchone() is None:
                return False
            count = 0
            with cur.copy("COPY messages (session_id, seq, role, body, identity, token_count, "
                          "created_at, active, search_text, cjk_grams) FROM STDIN") as copy:
                for m in messages:
                    text = clean_text(searchable_text(m.message))
                    copy.write_row((session.id, m.seq, m.role, encode_json(m.message), m.identity,
                                    m.token_count, m.created_at, m.active, text,
                                    cjk_gram_list(text)))
                    count += 1
            cur.execute("UPDATE sessions SET message_count = %s WHERE id = %s",
                        (count, session.id))
            cur.executemany("""INSERT INTO checkpoints (session_id, summary_json, first_seq,
                                    last_seq, tail_start_seq, anchors_json, tokens_before,
                                    tokens_after, summarizer, status, summary_role, details_json,
                                    created_at)
                               VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)""",
                            [(session.id, encode_json(c.summary), c.first_seq, c.last_seq,
                              c.tail_start_seq, encode_json(list(c.anchors)), c.tokens_before,
                              c.tokens_after, c.summarizer, c.status, c.summary_role,
                              encode_json(dict(c.details)), c.created_at) for c in checkpoints])
            cur.executemany("""INSERT INTO events (session_id, kind, payload_json, created_at)
                               VALUES (%s, %s, %s, %s)""",
                            [(session.id, e.kind, encode_json(e.payload), e.created_at)
                             for e in events])
            for rewind in rewinds:
                record = rewind.record
                cur.execute("""INSERT INTO rewinds (session_id, from_seq, count, created_at, undone)
                               VALUES (%s, %s, %s, %s, %s) RETURNING id""",
                            (session.id, record.from_seq, record.count, record.created_at,
                             record.undone))
                row = cur.fetchone()
                assert row is not None  # INSERT … RETURNING always returns the row
                cur.execute("UPDATE messages SET rewind_id = %s WHERE session_id = %s "
                            "AND seq = ANY(%s)", (row[0], session.id, list(rewind.seqs)))
        return True

    def list_rewinds(self, session_id: str) -> list[RewindRows]:
        with self._tx("list rewinds") as cur:
            cur.execute("SELECT 1 FROM sessions WHERE id = %s", (session_id,))
            if cur.fetchone() is None:
                raise NotFound(f"no session {session_id}")
            cur.execute("SELECT rewind_id, seq FROM messages WHERE session_id = %s "
                        "AND rewind_id IS NOT NULL ORDER BY seq", (session_id,))
            held: dict[int, list[int]] = {}
            for rewind_id, seq in cur.fetchall():
                held.setdefault(int(rewind_id), []).append(int(seq))
            cur.execute(f"SELECT {REWIND_COLS} FROM rewinds WHERE session_id = %s ORDER BY id",
                        (session_id,))
            records = [_rewind_from_row(row) for row in cur.fetchall()]
            return [RewindRows(r, tuple(held.get(r.id, ()))) for r in records]

    def memory_documents(self) -> list[tuple[str, str]]:
        with self._tx("list memory documents") as cur:
            cur.execute("SELECT profile, target FROM memory_docs ORDER BY profile, target")
            return [(r[0], r[1]) for r in cur.fetchall()]
