"""The message ledger on SQLite: append, sync a full history, read, rewind, fork.

Invariants:
- ``seq`` comes from ``sessions.last_seq`` inside the IMMEDIATE write transaction: strictly
  increasing per session, never reused (not even after a rewind), no gaps within one call.
- Each row's ``identity`` chains from the previous *active* row (``message_identity``), so the
  active rows always form one hash chain; a UNIQUE partial index on (session_id, identity)
  WHERE active backs the no-duplicates rule even if the logic above it were wrong.
- ``sync_messages(history)``: the longest common prefix of ``history`` and the stored active chain
  is skipped; if the history diverges from the stored chain at position k (a different message
  there), the stored active rows from k on are rewound (recorded, reversible) and the rest of the
  history appended. A history that is a strict prefix of the stored chain changes nothing (an
  out-of-order or trimmed resend must not rewind newer turns). With ``usage``, the session's
  totals hold each row's stored usage once: the rows it rewinds take theirs out, the rows it
  keeps add their growth (``store.base.encode_spent``).
- ``append_messages(..., expect_last=identity)`` appends only if the last active row still has
  that identity (checked inside the write transaction): Conflict, nothing stored, otherwise.
- ``rewind`` starts at an active user message; ``undo_rewind`` restores exactly the rows that
  rewind deactivated, and only while the active chain still ends where it ended then (nothing
  appended or rewound since): otherwise it raises Conflict.
- Nothing here deletes a row.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator, Sequence
from typing import Any

from refold import _records as records
from refold.errors import Conflict, InvalidInput, MessageValidationError, NotActive, NotFound
from refold.messages.model import Message, as_plain_messages, identity_and_json, wire_form
from refold.store.base import (
    REPLY_KEY_CHARS,
    SPENT_NOTHING,
    AppendResult,
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
from refold.store.rules import check_fork_kind, restore_point
from refold.store.sqlite import indexer
from refold.store.sqlite.rows import (
    MESSAGE_COLUMNS,
    message_columns,
    reply_key,
    to_message,
    to_rewind,
)
from refold.store.sqlite.sessions import SessionOps, add_usage_in, check_draft
from refold.store.titles import sanitize_title

_PAGE = 500


def _identities(messages: Sequence[Message], previous: str | None) -> list[str]:
    """Chained identities; a message that cannot be hashed as JSON is a validation error."""
    return _identities_and_json(messages, previous)[0]


def _identities_and_json(messages: Sequence[Message], previous: str | None
                         ) -> tuple[list[str], list[str | None]]:
    """``_identities``, and per message the canonical JSON of its wire form when its identity
    hashed that very text (``identity_and_json``; None: encode it when storing)."""
    out: list[str] = []
    texts: list[str | None] = []
    for index, message in enumerate(messages):
        try:
            previous, text = identity_and_json(message, previous)
        except (TypeError, ValueError) as exc:
            raise MessageValidationError(f"cannot be stored as JSON: {exc}",
                                         index=index) from exc
        out.append(previous)
        texts.append(text)
    return out, texts


def _check_batch(messages: Sequence[Message],
                 token_counts: Sequence[int | None] | None) -> list[int | None]:
    if isinstance(messages, dict | str | bytes):
        raise InvalidInput("messages must be a list of message objects")
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise MessageValidationError(f"expected an object, got {type(message).__name__}",
                                         index=index)
        if not isinstance(message.get("role"), str) or not message.get("role"):
            raise MessageValidationError("missing or invalid role", index=index, field="role")
        if not isinstance(message.get("content"), str | list | None):
            raise MessageValidationError("content must be text, a list of parts or null",
                                         index=index, field="content")
    if token_counts is None:
        return [None] * len(messages)
    if len(token_counts) != len(messages):
        raise InvalidInput(f"{len(token_counts)} token counts for {len(messages)} messages")
    return list(token_counts)


class LedgerOps(SessionOps):
    """Mixin: message rows."""

    def _last_active(self, conn: sqlite3.Connection, session_id: str) -> tuple[int, str] | None:
        row = conn.execute("SELECT seq, identity FROM messages WHERE session_id = ? AND active = 1 "
                           "ORDER BY seq DESC LIMIT 1", (session_id,)).fetchone()
        return (int(row[0]), str(row[1])) if row else None

    def _insert(self, conn: sqlite3.Connection, session: Session | str,
                messages: Sequence[Message], counts: Sequence[int | None],
                identities: Sequence[str], last_seq: int | None = None,
                usage: Usage | None = None,
                indexed_through: int | None = None,
                times: Sequence[float] | None = None,
                spent: Sequence[Usage | None] | None = None,
                canonical: Sequence[str | None] | None = None) -> list[StoredMessage]:
        """Insert the rows after the session's last seq (read unless given) and bump its
        counters — and its usage totals, in the same UPDATE, when ``usage`` is given. The rows
        are indexed for search later, in a batch (``indexer.py``; ``indexed_through`` is the
        watermark when the caller read it already). ``spent``: per row, what of the totals it
        holds (``encode_spent``; the caller adds it). ``canonical``: per row, its wire form's
        canonical JSON when the caller has it (``_identities_and_json``)."""
        session_id = session if isinstance(session, str) else session.id
        if not messages:
            if usage is not None:
                add_usage_in(conn, session_id, usage)
            return []
        if last_seq is None:
            last_seq = conn.execute("SELECT last_seq FROM sessions WHERE id = ?",
                                    (session_id,)).fetchone()[0]
        now = time.time()
        rows, out = [], []
        for offset, (message, count, identity) in enumerate(zip(messages, counts, identities,
                                                               strict=True)):
            seq = last_seq + 1 + offset
            when = times[offset] if times is not None else now
            try:
                role, body, text, tool_call_id, cjk = message_columns(
                    message, canonical[offset] if canonical is not None else None)
            except (TypeError, ValueError) as exc:  # not JSON-serializable
                raise MessageValidationError(f"cannot be stored as JSON: {exc}",
                                             index=offset) from exc
            rows.append((session_id, seq, role, body, text, tool_call_id, count, when,
                         identity, cjk, encode_spent(spent[offset]) if spent else None))
            out.append((seq, identity, count, when))
        insert = ("INSERT INTO messages (session_id, seq, role, message, text, tool_call_id, "
                  "token_count, created_at, active, identity, has_cjk, spent) "
                  "VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?)")
        if len(rows) == 1:
            top = conn.execute(insert, rows[0]).lastrowid
        else:
            conn.executemany(insert, rows)
            top = None
        if usage is None:
            conn.execute("UPDATE sessions SET last_seq = ?, message_count = message_count + ? "
                         "WHERE id = ?", (last_seq + len(rows), len(rows), session_id))
        else:
            conn.execute(
                "UPDATE sessions SET last_seq = ?, message_count = message_count + ?, "
                "input_tokens = input_tokens + ?, output_tokens = output_tokens + ?, "
                "cache_read_tokens = cache_read_tokens + ?, cost_usd = cost_usd + ?, "
                "model = coalesce(?, model) WHERE id = ?",
                (last_seq + len(rows), len(rows), int(usage.input_tokens),
                 int(usage.output_tokens), int(usage.cache_read_tokens), float(usage.cost_usd),
                 usage.model, session_id))
        indexer.after_insert(conn, len(rows), top, indexed_through)  # off the commit path unless the tail is long
        # The wire dicts themselves (not a JSON round trip): appending is the hot path.
        return [StoredMessage(session_id, seq, wire_form(message), identity, count, when, True)
                for (seq, identity, count, when), message in zip(out, messages, strict=True)]

    def append_messages(self, session_id: str, messages: Sequence[Message], *,
                        token_counts: Sequence[int | None] | None = None,
                        expect_last: str | None = None,
                        usage: Usage | None = None) -> AppendResult:
        messages = as_plain_messages(messages)  # an SDK's message objects taken as dicts
        counts = _check_batch(messages, token_counts)
        with self.db.write() as conn:
            # the session (NotFound), its last seq, latest checkpoint and last active message:
            # one statement (appending is the hot path)
            head = conn.execute(
                "SELECT s.last_seq, (SELECT id FROM checkpoints WHERE session_id = ?1 "
                "ORDER BY id DESC LIMIT 1), m.seq, m.identity, (SELECT indexed_through FROM "
                f"{indexer.STATE}) FROM sessions s LEFT JOIN "
                "(SELECT seq, identity FROM messages WHERE session_id = ?1 AND active = 1 "
                "ORDER BY seq DESC LIMIT 1) m WHERE s.id = ?1", (session_id,)).fetchone()
            if head is None:
                self._session(conn, session_id)  # raises NotFound, worded as everywhere
            last = (int(head[2]), str(head[3])) if head[2] is not None else None
            if expect_last is not None and (last[1] if last else "") != expect_last:
                raise Conflict(f"session {session_id} changed: its last message is not the "
                               "expected one", hint="sync the whole history instead")
            identities, canonical = _identities_and_json(messages, last[1] if last else None)
            appended = self._insert(conn, session_id, messages, counts, identities,
                                    last_seq=int(head[0]), usage=usage,
                                    indexed_through=int(head[4]), canonical=canonical)
            if expect_last is None:
                return AppendResult(appended, 0)
            end = (appended[-1].seq, appended[-1].identity) if appended else last
            tip = ViewTip(end[0] if end else None, end[1] if end else None,
                          int(head[1]) if head[1] is not None else None)
            return AppendResult(appended, 0, tip=tip)

    def sync_messages(self, session_id: str, history: Sequence[Message], *,
                      token_counts: Sequence[int | None] | None = None,
                      created_at: Sequence[float | None] | None = None,
                      usage: Sequence[Usage | None] | None = None,
                      create: SessionDraft | None = None,
                      expect_last: str | None = None) -> AppendResult:
        history = as_plain_messages(history)
        counts = _check_batch(history, token_counts)
        times = message_times(created_at, len(history), time.time()) \
            if created_at is not None else None
        appended_usage(usage, len(history), 0)  # the lengths checked before the write
        identities = _identities(history, None)
        if create is not None:
            check_draft(create)
        with self.db.write() as conn:
            if create is not None and conn.execute("SELECT 1 FROM sessions WHERE id = ?",
                                                   (session_id,)).fetchone() is None:
                self._insert_session(conn, session_id, create)  # committed with the rows
            session = self._session(conn, session_id)
            if expect_last is not None:
                last = conn.execute("SELECT identity FROM messages WHERE session_id = ? AND "
                                    "active = 1 ORDER BY seq DESC LIMIT 1",
                                    (session_id,)).fetchone()
                if (last[0] if last else "") != expect_last:
                    raise Conflict(f"session {session_id} changed: its last message is not "
                                   "the expected one", hint="read it again")
            keep, rewound = self._common_prefix(conn, session_id, identities)
            appended = self._insert(conn, session, history[keep:], counts[keep:],
                                    identities[keep:],
                                    times=times[keep:] if times is not None else None,
                                    spent=usage[keep:] if usage is not None else None)
            spent = appended_usage(usage, len(history), keep)
            if spent is not None and appended:
                add_usage_in(conn, session_id, spent)
            if usage is not None and keep and any(u is not None for u in usage[:keep]):
                self._regrow(conn, session_id, usage[:keep])
            return AppendResult(appended, keep, rewound)

    def _regrow(self, conn: sqlite3.Connection, session_id: str,
                kept: Sequence[Usage | None]) -> None:
        """The kept rows' usage as the history gives it now (a call's tokens reported after
        its message was stored): each one's growth added to the totals (``encode_spent``)."""
        rows = conn.execute("SELECT seq, spent FROM messages WHERE session_id = ? AND active = 1 "
                            "ORDER BY seq LIMIT ?", (session_id, len(kept))).fetchall()
        total, updates = usage_regrowth(rows, kept)
        if total is not None:
            add_usage_in(conn, session_id, total)
            conn.executemany("UPDATE messages SET spent = ? WHERE session_id = ? AND seq = ?",
                            [(spent, session_id, seq) for spent, seq in updates])

    def _unspend(self, conn: sqlite3.Connection, session_id: str, from_seq: int) -> None:
        """Take the usage the active rows from ``from_seq`` on hold out of the totals (a sync
        is about to rewind them: the history replaced them); they hold none after."""
        where = "session_id = ? AND active = 1 AND seq >= ? AND spent IS NOT NULL"
        held = usage_sum([decode_spent(r[0]) for r in conn.execute(
            f"SELECT spent FROM messages WHERE {where}", (session_id, from_seq))])
        if held is not None:
            add_usage_in(conn, session_id, Usage(-held.input_tokens, -held.output_tokens,
                                                 -held.cache_read_tokens, -held.cost_usd))
            conn.execute(f"UPDATE messages SET spent = ? WHERE {where}",
                         (SPENT_NOTHING, session_id, from_seq))

    def _common_prefix(self, conn: sqlite3.Connection, session_id: str,
                       identities: list[str]) -> tuple[int, int]:
        """(how many of ``identities`` are stored already, how many stored rows were rewound;
        the usage they held taken out of the totals)."""
        last = self._last_active(conn, session_id)
        if last is None:
            return 0, 0
        # Identities chain, so the stored tip appearing at position i means 0..i all match.
        positions = {identity: i for i, identity in enumerate(identities)}
        if last[1] in positions:
            return positions[last[1]] + 1, 0
        stored = conn.execute("SELECT seq, identity FROM messages WHERE session_id = ? "
                              "AND active = 1 ORDER BY seq", (session_id,)).fetchall()
        keep = 0
        while (keep < len(stored) and keep < len(identities)
               and stored[keep][1] == identities[keep]):
            keep += 1
        if keep == len(identities):
            return keep, 0  # a strict prefix of what is stored: nothing new, nothing rewound
        self._unspend(conn, session_id, int(stored[keep][0]))
        record = self._rewind_rows(conn, session_id, int(stored[keep][0]))
        return keep, record.count

    def _rewind_rows(self, conn: sqlite3.Connection, session_id: str,
                     from_seq: int) -> RewindRecord:
        now = time.time()
        cursor = conn.execute("INSERT INTO rewinds (session_id, from_seq, count, created_at) "
                              "VALUES (?, ?, 0, ?)", (session_id, from_seq, now))
        rewind_id = int(cursor.lastrowid or 0)
        count = conn.execute("UPDATE messages SET active = 0, rewind_id = ? WHERE session_id = ? "
                             "AND active = 1 AND seq >= ?",
                             (rewind_id, session_id, from_seq)).rowcount
        conn.execute("UPDATE rewinds SET count = ? WHERE id = ?", (count, rewind_id))
        return RewindRecord(rewind_id, session_id, from_seq, count, now, False)

    # -- reading ---------------------------------------------------------------------------
    def get_messages(self, session_id: str, *, include_inactive: bool = False,
                     start_seq: int | None = None, end_seq: int | None = None,
                     limit: int | None = None) -> list[StoredMessage]:
        sql = f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = ?"
        args: list[object] = [session_id]
        if not include_inactive:
            sql += " AND active = 1"
        if start_seq is not None:
            sql += " AND seq >= ?"
            args.append(int(start_seq))
        if end_seq is not None:
            sql += " AND seq <= ?"
            args.append(int(end_seq))
        sql += " ORDER BY seq"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(max(0, int(limit)))
        with self.db.read() as conn:
            self._session(conn, session_id)
            return [to_message(r) for r in conn.execute(sql, args)]

    def window_candidates(self, owner: str, replies: Sequence[Message], *,
                          limit: int = 16) -> list[str]:
        """See ``Store.window_candidates``: one lookup in the index of assistant rows by the
        start of their search text (``messages_reply_start``)."""
        keys = distinct_reply_keys(replies, reply_key)
        if not keys or limit <= 0:
            return []
        marks = ", ".join("?" * len(keys))
        with self.db.read() as conn:
            rows = conn.execute(
                "SELECT m.session_id FROM messages m JOIN sessions s ON s.id = m.session_id "
                f"WHERE m.role = 'assistant' AND substr(m.text, 1, {REPLY_KEY_CHARS}) "
                f"IN ({marks}) AND m.active = 1 AND s.owner = ? GROUP BY m.session_id "
                "ORDER BY max(m.id) DESC LIMIT ?", (*keys, owner, int(limit))).fetchall()
        return [str(r[0]) for r in rows]

    def sessions_opening_with(self, identity: str, *, owner: str = "",
                              limit: int = 32) -> list[str]:
        """See ``Store.sessions_opening_with`` (the partial index ``messages_opening``)."""
        with self.db.read() as conn:
            rows = conn.execute(
                "SELECT m.session_id FROM messages m JOIN sessions s ON s.id = m.session_id "
                "WHERE m.identity = ? AND m.seq = 1 AND s.owner = ? "
                "ORDER BY s.started_at DESC, m.id DESC LIMIT ?",
                (identity, owner, max(0, int(limit)))).fetchall()
        return [str(r[0]) for r in rows]

    def iter_messages(self, session_id: str, *,
                      include_inactive: bool = False) -> Iterator[StoredMessage]:
        """Pages through the session so the lock is never held while the caller works."""
        start = 0
        while True:
            page = self.get_messages(session_id, include_inactive=include_inactive,
                                     start_seq=start, limit=_PAGE)
            yield from page
            if len(page) < _PAGE:
                return
            start = page[-1].seq + 1

    def last_message(self, session_id: str) -> StoredMessage | None:
        """The last active message, or None for an empty session."""
        with self.db.read() as conn:
            self._session(conn, session_id)
            row = conn.execute(f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = ? "
                               "AND active = 1 ORDER BY seq DESC LIMIT 1",
                               (session_id,)).fetchone()
            return to_message(row) if row else None

    def messages_around(self, session_id: str, seq: int, *, before: int = 2, after: int = 2,
                        include_inactive: bool = False) -> list[StoredMessage]:
        """Up to ``before`` rows before ``seq``, the row at ``seq`` (if visible), ``after`` after."""
        with self.db.read() as conn:
            return self._around(conn, session_id, seq, before, after, include_inactive)

    def _around(self, conn: sqlite3.Connection, session_id: str, seq: int, before: int,
                after: int, include_inactive: bool) -> list[StoredMessage]:
        return (_earlier(conn, session_id, seq, before, include_inactive)
                + _from(conn, session_id, seq, after, include_inactive))

    def _around_id(self, conn: sqlite3.Connection, message_id: int | None, session_id: str,
                   seq: int, before: int, after: int, include_inactive: bool,
                   near: Sequence[tuple[Any, ...]] | None = None) -> list[StoredMessage]:
        """``_around`` for a message whose row id is known, read from the rows stored next to
        it (a session's messages are usually stored together, so they share its page): on a
        cold cache a search's windows then cost no index lookups. A side the neighbourhood
        cannot settle (a seq missing from it before enough rows are found: the session's
        start or end, or rows stored elsewhere) is asked of the index as ``_around`` does.
        ``near``: rows read already (``neighbours``, for several hits in one statement)."""
        if message_id is None:
            return self._around(conn, session_id, seq, before, after, include_inactive)
        span = max(before, after) + 1  # one more each side: room for a row of another session
        if near is None:
            near = conn.execute(
                f"SELECT {MESSAGE_COLUMNS}, id FROM messages WHERE id BETWEEN ? AND ? "
                "AND +session_id = ?", (message_id - span, message_id + span, session_id)
                ).fetchall()  # a rowid range
        by_seq = {int(r[1]): r for r in near if r[0] == session_id
                  and message_id - span <= r[7] <= message_id + span}

        def walk(start: int, step: int, want: int) -> list[tuple[Any, ...]] | None:
            found: list[tuple[Any, ...]] = []
            at = start
            while len(found) < want:
                row = by_seq.get(at)
                if row is None:
                    return None  # not settled here
                if include_inactive or row[6]:
                    found.append(row)
                at += step
            return found

        earlier = walk(seq - 1, -1, max(0, before))
        own = by_seq.get(seq)
        later = walk(seq + 1, 1, max(0, after))
        out = (_earlier(conn, session_id, seq, before, include_inactive) if earlier is None
               else [to_message(r) for r in reversed(earlier)])
        if own is None or later is None:
            return out + _from(conn, session_id, seq, after, include_inactive)
        shown = [own] if include_inactive or own[6] else []
        return out + [to_message(r) for r in shown + later]

    @staticmethod
    def neighbours(conn: sqlite3.Connection, message_ids: Sequence[int], span: int
                   ) -> list[tuple[Any, ...]]:
        """The rows within ``span`` ids of any of ``message_ids``, in one statement (the
        ``near`` of their ``_around_id`` calls: a search's windows cost one read, not one a
        hit); each row is ``MESSAGE_COLUMNS`` then its id."""
        ranges = sorted({(i - span, i + span) for i in message_ids})
        if not ranges:
            return []
        found: list[tuple[Any, ...]] = []
        for start in range(0, len(ranges), 400):  # (bound parameters: 800 a statement)
            part = ranges[start:start + 400]
            where = " OR ".join(["id BETWEEN ? AND ?"] * len(part))
            found += conn.execute(f"SELECT {MESSAGE_COLUMNS}, id FROM messages WHERE {where}",
                                  [v for pair in part for v in pair]).fetchall()
        return found

    def set_token_counts(self, session_id: str, counts: dict[int, int]) -> None:
        with self.db.write() as conn:
            self._session(conn, session_id)
            conn.executemany("UPDATE messages SET token_count = ? WHERE session_id = ? AND seq = ?",
                             [(int(c), session_id, int(s)) for s, c in counts.items()])

    # -- rewind and fork -------------------------------------------------------------------
    def rewind(self, session_id: str, from_seq: int, *,
               any_role: bool = False) -> RewindRecord:
        with self.db.write() as conn:
            self._session(conn, session_id)
            row = conn.execute("SELECT role, active FROM messages WHERE session_id = ? AND seq = ?",
                               (session_id, int(from_seq))).fetchone()
            if row is None or not row[1]:
                raise NotActive(f"session {session_id} has no active message {from_seq}")
            if row[0] != "user" and not any_role:
                raise InvalidInput(f"message {from_seq} is from the {row[0]}; rewind starts "
                                   "at a user message", hint="give the seq of a user message")
            return self._rewind_rows(conn, session_id, int(from_seq))

    def undo_rewind(self, rewind_id: int) -> RewindRecord:
        with self.db.write() as conn:
            row = conn.execute("SELECT id, session_id, from_seq, count, created_at, undone "
                               "FROM rewinds WHERE id = ?", (int(rewind_id),)).fetchone()
            if row is None:
                raise NotFound(f"no rewind {rewind_id}")
            record = to_rewind(row)
            if record.undone:
                raise Conflict(f"rewind {rewind_id} is already undone")
            later = self._check_restorable(conn, record)
            moved = None if later is None else self._rewind_rows(conn, record.session_id, later)
            conn.execute("UPDATE messages SET active = 1, rewind_id = NULL WHERE rewind_id = ?",
                         (record.id,))
            conn.execute("UPDATE rewinds SET undone = 1 WHERE id = ?", (record.id,))
            return records.replace(to_rewind((*row[:5], 1)),
                                   replaced_by=None if moved is None else moved.id)

    def _check_restorable(self, conn: sqlite3.Connection, record: RewindRecord) -> int | None:
        """Conflict unless ``record`` can be undone; the seq of the first active row after its
        rows (to be rewound in turn), or None."""
        first = conn.execute(f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE rewind_id = ? "
                             "ORDER BY seq LIMIT 1", (record.id,)).fetchone()
        if first is None:
            return None
        restored = to_message(first)
        before = conn.execute("SELECT seq, identity FROM messages WHERE session_id = ? "
                              "AND active = 1 AND seq < ? ORDER BY seq DESC",
                              (record.session_id, restored.seq))
        point = restore_point(record, restored, before)
        later = conn.execute("SELECT min(seq) FROM messages WHERE session_id = ? AND active = 1 "
                             "AND seq > ?", (record.session_id, point)).fetchone()
        return None if later is None or later[0] is None else int(later[0])

    def fork_session(self, session_id: str, at_seq: int | None = None, *,
                     kind: str = "fork", title: str | None = None) -> Session:
        """A new child session holding copies of the active messages up to ``at_seq``."""
        check_fork_kind(kind)
        with self.db.write() as conn:
            parent = self._session(conn, session_id)
            last = self._fork_point(conn, session_id, at_seq)
            clean = sanitize_title(title)
            if clean is None and parent.title:
                clean = self.next_lineage_title(parent.title)
            child = self.create_session(title=clean, source=parent.source, model=parent.model,
                                        parent_session_id=parent.id, link_kind=kind,
                                        owner=parent.owner)
            copied = conn.execute(
                "INSERT INTO messages (session_id, seq, role, message, text, tool_call_id, "
                "token_count, created_at, active, identity, has_cjk) "
                "SELECT ?, row_number() OVER (ORDER BY seq), role, message, text, tool_call_id, "
                "token_count, created_at, 1, identity, has_cjk FROM messages "
                "WHERE session_id = ? AND active = 1 AND seq <= ? ORDER BY seq",
                (child.id, parent.id, last)).rowcount
            conn.execute("UPDATE sessions SET last_seq = ?, message_count = ?, fork_seq = ? "
                         "WHERE id = ?", (copied, copied, last, child.id))
            indexer.after_insert(conn, copied)
            return self._session(conn, child.id)

    def _fork_point(self, conn: sqlite3.Connection, session_id: str, at_seq: int | None) -> int:
        if at_seq is None:
            last = self._last_active(conn, session_id)
            return last[0] if last else 0
        row = conn.execute("SELECT 1 FROM messages WHERE session_id = ? AND seq = ? "
                           "AND active = 1", (session_id, int(at_seq))).fetchone()
        if row is None:
            raise NotActive(f"session {session_id} has no active message {at_seq} to fork at")
        return int(at_seq)


def _earlier(conn: sqlite3.Connection, session_id: str, seq: int, count: int,
             include_inactive: bool) -> list[StoredMessage]:
    """The ``count`` messages before ``seq`` in ``session_id`` (active ones only unless
    ``include_inactive``), in seq order."""
    active = "" if include_inactive else " AND active = 1"
    rows = conn.execute(f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = ?{active} "
                        "AND seq < ? ORDER BY seq DESC LIMIT ?",
                        (session_id, seq, max(0, count))).fetchall()
    return [to_message(r) for r in reversed(rows)]


def _from(conn: sqlite3.Connection, session_id: str, seq: int, count: int,
          include_inactive: bool) -> list[StoredMessage]:
    """The message at ``seq`` (when shown) and the ``count`` after it, in seq order."""
    active = "" if include_inactive else " AND active = 1"
    rows = conn.execute(f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = ?{active} "
                        "AND seq >= ? ORDER BY seq LIMIT ?",
                        (session_id, seq, max(0, count) + 1)).fetchall()
    if rows and rows[0][1] != seq:  # the row itself is hidden: keep ``count`` rows only
        rows = rows[:max(0, count)]
    return [to_message(r) for r in rows]
