"""The message ledger on PostgreSQL: append, sync, read, rewind, fork, checkpoints, events.

Invariants:
- Writers to one session are serialized by a row lock on the session (``FOR NO KEY UPDATE``,
  transaction-scoped like an advisory xact lock, so it survives connection pooling and dies with
  a crashed client); seq is max(seq) + 1 under it: strictly increasing, never reused (rewound
  rows keep theirs), no gaps within one call.
- ``sync_messages`` compares the history's identity chain with the stored active chain under
  that lock, so any number of processes sending the same history append its new suffix once. The
  unique partial index on (session_id, identity) WHERE active backs this up at the database.
  A history diverging at position k rewinds the stored active rows from k on (recorded); a
  strict prefix of the stored chain changes nothing.
- ``rewind`` starts at an active user message; ``undo_rewind`` restores exactly its rows, and
  only while they would still extend the active chain (else Conflict). ``fork_session`` copies
  the active rows up to ``at_seq`` (renumbered from 1, identities kept).
- Message bodies are stored as lossless JSON text (see ``codec``); only the derived
  ``search_text`` is cleaned.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

from refold import _records as records
from refold.errors import Conflict, InvalidInput, MessageValidationError, NotActive, NotFound
from refold.messages.model import (
    Message,
    as_plain_messages,
    chain_identities,
    searchable_text,
    wire_form,
)
from refold.store.base import (
    REPLY_KEY_CHARS,
    SPENT_NOTHING,
    AppendResult,
    Checkpoint,
    CheckpointBase,
    CheckpointDraft,
    Event,
    Projection,
    RewindRecord,
    Session,
    SessionDraft,
    StoredMessage,
    Usage,
    ViewTip,
    appended_usage,
    decode_spent,
    distinct_reply_keys,
    encode_spent,
    message_times,
    usage_regrowth,
    usage_sum,
)
from refold.store.postgres.codec import cjk_gram_list, clean_text, encode_json
from refold.store.postgres.core import (
    CHECKPOINT_COLS,
    MESSAGE_COLS,
    SESSION_COLS,
    Cursor,
    PgCore,
    checkpoint_from_row,
    event_from_row,
    message_from_row,
    session_from_row,
)
from refold.store.postgres.sessions import add_usage_in, check_draft, insert_session
from refold.store.rules import (
    check_checkpoint_commit,
    check_checkpoint_draft,
    check_fork_kind,
    restore_point,
)
from refold.store.titles import like_escape, sanitize_title, split_lineage_title
from refold.store.titles import next_lineage_title as next_title_from

REWIND_COLS = "id, session_id, from_seq, count, created_at, undone"
_ITER_BATCH = 500


def _check_messages(messages: Sequence[Message],
                    token_counts: Sequence[int | None] | None) -> list[Message]:
    if isinstance(messages, dict | str | bytes):
        raise InvalidInput("messages must be a list of message objects")
    out: list[Message] = []
    for index, message in enumerate(as_plain_messages(messages)):  # SDK objects as dicts
        if not isinstance(message, dict):
            raise MessageValidationError(f"expected an object, got {type(message).__name__}",
                                         index=index)
        if not isinstance(message.get("role"), str) or not message["role"]:
            raise MessageValidationError("missing or invalid role", index=index, field="role")
        out.append(wire_form(message))
    if token_counts is not None and len(token_counts) != len(out):
        raise InvalidInput(f"{len(token_counts)} token counts for {len(out)} messages")
    return out


def reply_key(message: Message) -> str:
    """What the window-candidate index holds of an assistant row: the start of its search
    text, as ``_insert`` stores it (empty: nothing to look up)."""
    return clean_text(searchable_text(wire_form(message)))[:REPLY_KEY_CHARS]


def _rewind_from_row(row: tuple[Any, ...]) -> RewindRecord:
    return RewindRecord(id=row[0], session_id=row[1], from_seq=row[2], count=row[3],
                        created_at=row[4], undone=row[5])


class LedgerMixin(PgCore):
    # -- writing ----------------------------------------------------------------------------
    def _insert(self, cur: Cursor, session_id: str, messages: list[Message],
                identities: list[str], counts: Sequence[int | None] | None,
                first_seq: int, created_at: float | Sequence[float],
                spent: Sequence[Usage | None] | None = None) -> list[StoredMessage]:
        """Insert the rows from ``first_seq``; ``created_at`` one time for all, or one each;
        ``spent``: per row, what of the session's totals it holds (``encode_spent``; the
        caller adds it)."""
        times = [float(created_at)] * len(messages) if isinstance(created_at, int | float) \
            else list(created_at)
        rows = []
        for i, message in enumerate(messages):
            count = counts[i] if counts is not None else None
            text = clean_text(searchable_text(message))
            rows.append((session_id, first_seq + i, str(message["role"]), encode_json(message),
                         identities[i], count, times[i], text, cjk_gram_list(text),
                         encode_spent(spent[i]) if spent else None))
        cur.executemany("""INSERT INTO messages (session_id, seq, role, body, identity,
                                token_count, created_at, search_text, cjk_grams, spent)
                           VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)""", rows)
        cur.execute("UPDATE sessions SET message_count = message_count + %s WHERE id = %s",
                    (len(rows), session_id))
        return [StoredMessage(session_id, first_seq + i, m, identities[i],
                              counts[i] if counts is not None else None, times[i], True)
                for i, m in enumerate(messages)]

    def _tip(self, cur: Cursor, session_id: str) -> tuple[int, str | None]:
        """(highest seq stored, identity of the last active row), in one round trip."""
        top, identity, _, _ = self._tip_and_checkpoint(cur, session_id)
        return top, identity

    def _tip_and_checkpoint(self, cur: Cursor, session_id: str
                            ) -> tuple[int, str | None, int | None, int | None]:
        """(highest seq stored, identity and seq of the last active row, latest checkpoint
        id), in one round trip."""
        cur.execute("""SELECT (SELECT coalesce(max(seq), 0) FROM messages
                               WHERE session_id = %(s)s),
                              m.identity, m.seq,
                              (SELECT id FROM checkpoints WHERE session_id = %(s)s
                               ORDER BY id DESC LIMIT 1)
                       FROM (SELECT 1) AS one LEFT JOIN LATERAL (
                           SELECT seq, identity FROM messages WHERE session_id = %(s)s
                           AND active ORDER BY seq DESC LIMIT 1) AS m ON true""",
                    {"s": session_id})
        row = cur.fetchone()
        assert row is not None
        return int(row[0]), row[1], row[2], row[3]

    def append_messages(self, session_id: str, messages: Sequence[Message], *,
                        token_counts: Sequence[int | None] | None = None,
                        expect_last: str | None = None,
                        usage: Usage | None = None) -> AppendResult:
        clean = _check_messages(messages, token_counts)
        with self._tx("append messages") as cur:
            self._require_session(cur, session_id, lock=True)  # the row lock orders writers
            top, last_identity, last_seq, checkpoint = self._tip_and_checkpoint(cur, session_id)
            if expect_last is not None and (last_identity or "") != expect_last:
                raise Conflict(f"session {session_id} changed: its last message is not the "
                               "expected one", hint="sync the whole history instead")
            stored = self._insert(cur, session_id, clean, chain_identities(clean, last_identity),
                                  token_counts, top + 1, time.time()) if clean else []
            if usage is not None:
                add_usage_in(cur, session_id, usage)
        if expect_last is None:
            return AppendResult(appended=stored, skipped=0)
        end = (stored[-1].seq, stored[-1].identity) if stored else (last_seq, last_identity)
        return AppendResult(appended=stored, skipped=0, tip=ViewTip(end[0], end[1], checkpoint))

    def sync_messages(self, session_id: str, history: Sequence[Message], *,
                      token_counts: Sequence[int | None] | None = None,
                      created_at: Sequence[float | None] | None = None,
                      usage: Sequence[Usage | None] | None = None,
                      create: SessionDraft | None = None,
                      expect_last: str | None = None) -> AppendResult:
        clean = _check_messages(history, token_counts)
        appended_usage(usage, len(clean), 0)  # the lengths checked before the write
        now = time.time()
        times = message_times(created_at, len(clean), now) if created_at is not None \
            else [now] * len(clean)
        identities = chain_identities(clean)
        if create is not None:
            check_draft(create)
        with self._tx("sync messages") as cur:
            if create is not None:  # committed with the rows, or not at all
                cur.execute("SELECT 1 FROM sessions WHERE id = %s", (session_id,))
                if cur.fetchone() is None:
                    insert_session(self, cur, session_id, create)
            self._require_session(cur, session_id, lock=True)
            if not clean:
                return AppendResult(appended=[], skipped=0)
            top, last_identity = self._tip(cur, session_id)
            if expect_last is not None and (last_identity or "") != expect_last:
                raise Conflict(f"session {session_id} changed: its last message is not the "
                               "expected one", hint="read it again")
            matched, rewound = self._match_prefix(cur, session_id, identities, last_identity)
            new = clean[matched:]
            counts = token_counts[matched:] if token_counts is not None else None
            stored = self._insert(cur, session_id, new, identities[matched:], counts, top + 1,
                                  times[matched:],
                                  usage[matched:] if usage is not None else None) if new else []
            spent = appended_usage(usage, len(clean), matched)
            if spent is not None and stored:
                add_usage_in(cur, session_id, spent)
            if usage is not None and matched and any(u is not None for u in usage[:matched]):
                self._regrow(cur, session_id, usage[:matched])
        return AppendResult(appended=stored, skipped=matched, rewound=rewound)

    def _regrow(self, cur: Cursor, session_id: str, kept: Sequence[Usage | None]) -> None:
        """The kept rows' usage as the history gives it now (a call's tokens reported after
        its message was stored): each one's growth added to the totals (``encode_spent``)."""
        cur.execute("""SELECT seq, spent FROM messages WHERE session_id = %s AND active
                       ORDER BY seq LIMIT %s""", (session_id, len(kept)))
        total, updates = usage_regrowth(cur.fetchall(), kept)
        if total is not None:
            add_usage_in(cur, session_id, total)
            cur.executemany("UPDATE messages SET spent = %s WHERE session_id = %s AND seq = %s",
                            [(spent, session_id, seq) for spent, seq in updates])

    def _unspend(self, cur: Cursor, session_id: str, from_seq: int) -> None:
        """Take the usage the active rows from ``from_seq`` on hold out of the totals (a sync
        is about to rewind them: the history replaced them); they hold none after."""
        where = "session_id = %s AND active AND seq >= %s AND spent IS NOT NULL"
        cur.execute(f"SELECT spent FROM messages WHERE {where}", (session_id, from_seq))
        held = usage_sum([decode_spent(r[0]) for r in cur.fetchall()])
        if held is not None:
            add_usage_in(cur, session_id, Usage(-held.input_tokens, -held.output_tokens,
                                                -held.cache_read_tokens, -held.cost_usd))
            cur.execute(f"UPDATE messages SET spent = %s WHERE {where}",
                        (SPENT_NOTHING, session_id, from_seq))

    def _match_prefix(self, cur: Cursor, session_id: str, identities: list[str],
                      last_identity: str | None) -> tuple[int, int]:
        """How many leading history messages are stored; rewinds stored rows past a divergence.

        Returns (matched count, rows deactivated). Identities are chained, so the stored active
        row with the latest history identity fixes the whole common prefix; the usual case (a
        client re-sending the history plus new turns) is decided by the stored tip alone.
        """
        if last_identity is None:
            return 0, 0
        if last_identity in identities:
            return identities.index(last_identity) + 1, 0
        cur.execute("""SELECT seq, identity FROM messages
                       WHERE session_id = %s AND active AND identity = ANY(%s)
                       ORDER BY seq DESC LIMIT 1""", (session_id, identities))
        row = cur.fetchone()
        matched = identities.index(row[1]) + 1 if row else 0
        if matched == len(identities):
            return matched, 0  # the history is stored already (maybe followed by more rows)
        cur.execute("""SELECT seq FROM messages WHERE session_id = %s AND active AND seq > %s
                       ORDER BY seq LIMIT 1""", (session_id, row[0] if row else 0))
        diverged = cur.fetchone()
        if diverged is None:
            return matched, 0  # the stored chain ends inside the history: just append
        self._unspend(cur, session_id, int(diverged[0]))  # the history replaced them
        record = self._deactivate(cur, session_id, int(diverged[0]))
        return matched, record.count

    def _deactivate(self, cur: Cursor, session_id: str, from_seq: int) -> RewindRecord:
        cur.execute(f"""INSERT INTO rewinds (session_id, from_seq, count, created_at)
                        VALUES (%s, %s, 0, %s) RETURNING {REWIND_COLS}""",
                    (session_id, from_seq, time.time()))
        row = cur.fetchone()
        assert row is not None
        cur.execute("""UPDATE messages SET active = false, rewind_id = %s
                       WHERE session_id = %s AND active AND seq >= %s""",
                    (row[0], session_id, from_seq))
        count = cur.rowcount
        cur.execute(f"UPDATE rewinds SET count = %s WHERE id = %s RETURNING {REWIND_COLS}",
                    (count, row[0]))
        updated = cur.fetchone()
        assert updated is not None
        return _rewind_from_row(updated)

    def set_token_counts(self, session_id: str, counts: dict[int, int]) -> None:
        if not counts:
            return
        with self._tx("set token counts") as cur:
            self._require_session(cur, session_id)
            cur.executemany("UPDATE messages SET token_count = %s WHERE session_id = %s "
                            "AND seq = %s", [(c, session_id, s) for s, c in counts.items()])

    # -- reading ----------------------------------------------------------------------------
    def get_messages(self, session_id: str, *, include_inactive: bool = False,
                     start_seq: int | None = None, end_seq: int | None = None,
                     limit: int | None = None) -> list[StoredMessage]:
        where, args = self._range(session_id, include_inactive, start_seq, end_seq)
        limit_sql = " LIMIT %s" if limit is not None else ""
        if limit is not None:
            args.append(max(0, limit))
        with self._tx("read messages") as cur:
            self._require_session(cur, session_id)
            cur.execute(f"SELECT {MESSAGE_COLS} FROM messages WHERE {where} "
                        f"ORDER BY seq{limit_sql}", args)
            return [message_from_row(r) for r in cur.fetchall()]

    def window_candidates(self, owner: str, replies: Sequence[Message], *,
                          limit: int = 16) -> list[str]:
        """See ``Store.window_candidates``: one lookup in the index of assistant rows by the
        start of their search text (``messages_reply_start``)."""
        keys = distinct_reply_keys(replies, reply_key)
        if not keys or limit <= 0:
            return []
        with self._tx("find window candidates") as cur:
            cur.execute(
                "SELECT m.session_id FROM messages m JOIN sessions s ON s.id = m.session_id "
                f"WHERE m.role = 'assistant' AND left(m.search_text, {REPLY_KEY_CHARS}) "
                "= ANY(%s) AND m.active AND s.owner = %s GROUP BY m.session_id "
                "ORDER BY max(m.id) DESC LIMIT %s", (keys, owner, int(limit)))
            return [str(r[0]) for r in cur.fetchall()]

    def sessions_opening_with(self, identity: str, *, owner: str = "",
                              limit: int = 32) -> list[str]:
        """See ``Store.sessions_opening_with`` (the partial index ``messages_opening``)."""
        with self._tx("find sessions by their opening") as cur:
            cur.execute(
                "SELECT m.session_id FROM messages m JOIN sessions s ON s.id = m.session_id "
                "WHERE m.identity = %s AND m.seq = 1 AND s.owner = %s "
                "ORDER BY s.started_at DESC, m.id DESC LIMIT %s",
                (identity, owner, max(0, int(limit))))
            return [str(r[0]) for r in cur.fetchall()]

    @staticmethod
    def _range(session_id: str, include_inactive: bool, start_seq: int | None,
               end_seq: int | None) -> tuple[str, list[Any]]:
        where: list[str] = ["session_id = %s"]
        args: list[Any] = [session_id]
        if not include_inactive:
            where.append("active")
        if start_seq is not None:
            where.append("seq >= %s")
            args.append(start_seq)
        if end_seq is not None:
            where.append("seq <= %s")
            args.append(end_seq)
        return " AND ".join(where), args

    def iter_messages(self, session_id: str, *,
                      include_inactive: bool = False) -> Iterator[StoredMessage]:
        """Stream in seq order, one short transaction per batch (no connection held between)."""
        after = 0
        while True:
            batch = self.get_messages(session_id, include_inactive=include_inactive,
                                      start_seq=after + 1, limit=_ITER_BATCH)
            yield from batch
            if len(batch) < _ITER_BATCH:
                return
            after = batch[-1].seq

    def last_message(self, session_id: str) -> StoredMessage | None:
        with self._tx("read last message") as cur:
            self._require_session(cur, session_id)
            cur.execute(f"""SELECT {MESSAGE_COLS} FROM messages WHERE session_id = %s AND active
                            ORDER BY seq DESC LIMIT 1""", (session_id,))
            row = cur.fetchone()
        return message_from_row(row) if row else None

    def messages_around(self, session_id: str, seq: int, *, before: int = 2, after: int = 2,
                        include_inactive: bool = False) -> list[StoredMessage]:
        """Up to ``before`` rows before ``seq``, the row at ``seq`` (if visible), ``after`` after."""
        with self._tx("read messages around") as cur:
            self._require_session(cur, session_id)
            return self._around(cur, session_id, seq, before, after, include_inactive)

    def _around(self, cur: Cursor, session_id: str, seq: int, before: int, after: int,
                include_inactive: bool) -> list[StoredMessage]:
        active = "" if include_inactive else " AND active"
        cur.execute(f"""(SELECT {MESSAGE_COLS} FROM messages
                         WHERE session_id = %s AND seq < %s{active} ORDER BY seq DESC LIMIT %s)
                        UNION ALL
                        (SELECT {MESSAGE_COLS} FROM messages
                         WHERE session_id = %s AND seq >= %s{active} ORDER BY seq LIMIT %s)""",
                    (session_id, seq, max(0, before), session_id, seq, max(0, after) + 1))
        rows = sorted(cur.fetchall(), key=lambda r: r[1])
        earlier = [r for r in rows if r[1] < seq]
        rest = [r for r in rows if r[1] >= seq]
        if rest and rest[0][1] != seq:  # the row itself is hidden: keep ``after`` rows only
            rest = rest[:max(0, after)]
        return [message_from_row(r) for r in earlier + rest]

    # -- rewind and fork --------------------------------------------------------------------
    def rewind(self, session_id: str, from_seq: int, *,
               any_role: bool = False) -> RewindRecord:
        with self._tx("rewind") as cur:
            self._require_session(cur, session_id, lock=True)
            cur.execute("SELECT role, active FROM messages WHERE session_id = %s AND seq = %s",
                        (session_id, int(from_seq)))
            row = cur.fetchone()
            if row is None or not row[1]:
                raise NotActive(f"session {session_id} has no active message {from_seq}")
            if row[0] != "user" and not any_role:
                raise InvalidInput(f"message {from_seq} is from the {row[0]}; rewind starts "
                                   "at a user message", hint="give the seq of a user message")
            return self._deactivate(cur, session_id, int(from_seq))

    def undo_rewind(self, rewind_id: int) -> RewindRecord:
        """Restore exactly the rows a rewind deactivated, while the chain still allows it."""
        with self._tx("undo rewind") as cur:
            cur.execute(f"SELECT {REWIND_COLS} FROM rewinds WHERE id = %s", (int(rewind_id),))
            row = cur.fetchone()
            if row is None:
                raise NotFound(f"no rewind {rewind_id}")
            record = _rewind_from_row(row)
            self._require_session(cur, record.session_id, lock=True)
            cur.execute(f"SELECT {REWIND_COLS} FROM rewinds WHERE id = %s", (record.id,))
            record = _rewind_from_row(cur.fetchone() or row)  # re-read under the lock
            if record.undone:
                raise Conflict(f"rewind {rewind_id} is already undone")
            later = self._check_restorable(cur, record)
            moved = None if later is None else self._deactivate(cur, record.session_id, later)
            cur.execute("UPDATE messages SET active = true, rewind_id = NULL "
                        "WHERE rewind_id = %s", (record.id,))
            cur.execute(f"UPDATE rewinds SET undone = true WHERE id = %s RETURNING {REWIND_COLS}",
                        (record.id,))
            done = cur.fetchone()
        assert done is not None
        return records.replace(_rewind_from_row(done),
                               replaced_by=None if moved is None else moved.id)

    def _check_restorable(self, cur: Cursor, record: RewindRecord) -> int | None:
        """Conflict unless ``record`` can be undone; the seq of the first active row after its
        rows (to be rewound in turn), or None."""
        cur.execute(f"SELECT {MESSAGE_COLS} FROM messages WHERE rewind_id = %s "
                    "ORDER BY seq LIMIT 1", (record.id,))
        first = cur.fetchone()
        if first is None:
            return None
        restored = message_from_row(first)
        cur.execute("SELECT seq, identity FROM messages WHERE session_id = %s AND active "
                    "AND seq < %s ORDER BY seq DESC", (record.session_id, restored.seq))
        point = restore_point(record, restored, cur.fetchall())
        cur.execute("SELECT min(seq) FROM messages WHERE session_id = %s AND active AND seq > %s",
                    (record.session_id, point))
        later = cur.fetchone()
        return None if later is None or later[0] is None else int(later[0])

    def fork_session(self, session_id: str, at_seq: int | None = None, *,
                     kind: str = "fork", title: str | None = None) -> Session:
        """A new child session holding copies of the active messages up to ``at_seq``."""
        check_fork_kind(kind)
        from refold.store.postgres.sessions import new_session_id

        clean = sanitize_title(title)
        with self._tx("fork session") as cur:
            parent = self._load_session(cur, session_id)
            stop = self._fork_stop(cur, session_id, at_seq)
            if clean is None and parent.title:
                base, _ = split_lineage_title(parent.title)
                # two processes forking one lineage at once would both number their fork alike:
                # the second waits here until the first commits, then sees its title
                cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", ("refold:title:" + base,))
                cur.execute("SELECT title FROM sessions WHERE title = %s "
                            "OR title LIKE %s ESCAPE '\\'", (base, like_escape(base) + " #%"))
                clean = next_title_from(base, [r[0] for r in cur.fetchall()])
            elif clean is not None:
                cur.execute("SELECT id FROM sessions WHERE owner = %s AND title = %s",
                            (parent.owner, clean))
                taken = cur.fetchone()
                if taken is not None:
                    raise Conflict(f"the title {clean!r} is already used by session {taken[0]}",
                                   hint="choose another title")
            new_id = new_session_id()
            cur.execute(f"""INSERT INTO sessions (id, title, parent_session_id, link_kind, source,
                                model, owner, started_at, fork_seq, message_count)
                            SELECT %s, %s, %s, %s, %s, %s, %s, %s, %s, count(*)
                            FROM messages WHERE session_id = %s AND active AND seq <= %s
                            RETURNING {SESSION_COLS}""",
                        (new_id, clean, session_id, kind, parent.source, parent.model,
                         parent.owner, time.time(), stop, session_id, stop))
            row = cur.fetchone()
            cur.execute("""INSERT INTO messages (session_id, seq, role, body, identity,
                                token_count, created_at, search_text, cjk_grams)
                           SELECT %s, row_number() OVER (ORDER BY seq), role, body, identity,
                                token_count, created_at, search_text, cjk_grams
                           FROM messages WHERE session_id = %s AND active AND seq <= %s""",
                        (new_id, session_id, stop))
        assert row is not None
        return session_from_row(row)

    def _fork_stop(self, cur: Cursor, session_id: str, at_seq: int | None) -> int:
        if at_seq is None:
            cur.execute("SELECT coalesce(max(seq), 0) FROM messages WHERE session_id = %s "
                        "AND active", (session_id,))
            row = cur.fetchone()
            return int(row[0]) if row else 0
        cur.execute("SELECT 1 FROM messages WHERE session_id = %s AND seq = %s AND active",
                    (session_id, int(at_seq)))
        if cur.fetchone() is None:
            raise NotActive(f"session {session_id} has no active message {at_seq} to fork at")
        return int(at_seq)

    # -- checkpoints and the model view -----------------------------------------------------
    def add_checkpoint(self, session_id: str, draft: CheckpointDraft, *,
                       expect: CheckpointBase | None = None) -> Checkpoint:
        check_checkpoint_draft(draft)
        with self._tx("add checkpoint") as cur:
            # the session's row lock orders this with every writer: check and insert are one step
            self._require_session(cur, session_id, lock=True)
            latest = self._latest_checkpoint(cur, session_id)
            tip_active = False
            if expect is not None and expect.tip_seq is not None:
                cur.execute("SELECT active FROM messages WHERE session_id = %s AND seq = %s",
                            (session_id, expect.tip_seq))
                tip = cur.fetchone()
                tip_active = tip is not None and bool(tip[0])
            check_checkpoint_commit(session_id, draft, latest, expect, tip_active)
            cur.execute(f"""INSERT INTO checkpoints (session_id, summary_json, first_seq,
                                last_seq, tail_start_seq, anchors_json, tokens_before,
                                tokens_after, summarizer, status, summary_role, details_json,
                                created_at)
                            VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
                            RETURNING {CHECKPOINT_COLS}""",
                        (session_id, encode_json(draft.summary), draft.first_seq, draft.last_seq,
                         draft.tail_start_seq, encode_json(list(draft.anchors)),
                         draft.tokens_before, draft.tokens_after, draft.summarizer, draft.status,
                         draft.summary_role, encode_json(dict(draft.details)), time.time()))
            row = cur.fetchone()
        assert row is not None
        return checkpoint_from_row(row)

    def latest_checkpoint(self, session_id: str) -> Checkpoint | None:
        with self._tx("read checkpoint") as cur:
            self._require_session(cur, session_id)
            return self._latest_checkpoint(cur, session_id)

    def _latest_checkpoint(self, cur: Cursor, session_id: str) -> Checkpoint | None:
        cur.execute(f"""SELECT {CHECKPOINT_COLS} FROM checkpoints WHERE session_id = %s
                        ORDER BY id DESC LIMIT 1""", (session_id,))
        row = cur.fetchone()
        return checkpoint_from_row(row) if row else None

    def list_checkpoints(self, session_id: str) -> list[Checkpoint]:
        with self._tx("list checkpoints") as cur:
            self._require_session(cur, session_id)
            cur.execute(f"SELECT {CHECKPOINT_COLS} FROM checkpoints WHERE session_id = %s "
                        "ORDER BY id", (session_id,))
            return [checkpoint_from_row(r) for r in cur.fetchall()]

    def projection(self, session_id: str) -> Projection:
        """Latest checkpoint + active rows from its tail: index range scans only."""
        with self._tx("read projection") as cur:
            self._require_session(cur, session_id)
            checkpoint = self._latest_checkpoint(cur, session_id)
            start = checkpoint.tail_start_seq if checkpoint else 1
            cur.execute(f"""SELECT {MESSAGE_COLS} FROM messages
                            WHERE session_id = %s AND seq >= %s AND active ORDER BY seq""",
                        (session_id, start))
            messages = [message_from_row(r) for r in cur.fetchall()]
        return Projection(session_id=session_id, checkpoint=checkpoint, messages=messages)

    def view_tip(self, session_id: str) -> ViewTip:
        """The last active row and the latest checkpoint id: index lookups, one snapshot."""
        with self._tx("read view tip") as cur:
            self._require_session(cur, session_id)
            _, identity, seq, checkpoint = self._tip_and_checkpoint(cur, session_id)
        return ViewTip(seq, identity, checkpoint)

    # -- events -----------------------------------------------------------------------------
    def append_event(self, session_id: str, kind: str, payload: dict[str, Any]) -> Event:
        if not isinstance(kind, str) or not kind:
            raise InvalidInput("an event kind must be a non-empty string")
        with self._tx("append event") as cur:
            self._require_session(cur, session_id)
            cur.execute("""INSERT INTO events (session_id, kind, payload_json, created_at)
                           VALUES (%s, %s, %s, %s)
                           RETURNING id, session_id, kind, payload_json, created_at""",
                        (session_id, kind, encode_json(payload), time.time()))
            row = cur.fetchone()
        assert row is not None
        return event_from_row(row)

    def list_events(self, session_id: str, kind: str | None = None, *,
                    after_id: int = 0) -> list[Event]:
        with self._tx("list events") as cur:
            self._require_session(cur, session_id)
            cur.execute("""SELECT id, session_id, kind, payload_json, created_at FROM events
                           WHERE session_id = %s AND (%s::text IS NULL OR kind = %s)
                           AND id > %s ORDER BY id""", (session_id, kind, kind, after_id))
            return [event_from_row(r) for r in cur.fetchall()]
