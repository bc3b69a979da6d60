"""Converting between SQLite rows and the Store records; safe encoding of untrusted text.

Invariants:
- ``encode_json`` always produces text SQLite accepts: lone surrogates (from undecodable input)
  are kept losslessly as JSON ``\\uXXXX`` escapes, so ``json.loads`` gives back the same string.
- ``safe_text`` replaces what UTF-8 cannot carry with ``?``; it is used only for derived
  columns (search text), never for the stored message itself.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from refold.messages.model import Message, canonical_json, searchable_text, wire_form
from refold.search.query import text_has_cjk
from refold.store.base import (
    REPLY_KEY_CHARS,
    Checkpoint,
    Event,
    RewindRecord,
    Session,
    StoredMessage,
)

SESSION_COLUMNS = ("id, title, parent_session_id, link_kind, source, model, owner, started_at, "
                   "ended_at, end_reason, message_count, input_tokens, output_tokens, "
                   "cache_read_tokens, cost_usd, fork_seq")
MESSAGE_COLUMNS = "session_id, seq, message, identity, token_count, created_at, active"
CHECKPOINT_COLUMNS = ("id, session_id, summary, first_seq, last_seq, tail_start_seq, anchors, "
                      "tokens_before, tokens_after, summarizer, status, summary_role, details, "
                      "created_at")


def encode_json(value: Any, canonical: str | None = None) -> str:
    """Canonical JSON that always encodes to UTF-8 (non-ASCII kept unless it cannot be).
    ``canonical``: ``canonical_json(value)`` when the caller has it already."""
    text = canonical_json(value) if canonical is None else canonical
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return text


def safe_text(text: str) -> str:
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")


def message_columns(message: Message, canonical: str | None = None
                    ) -> tuple[str, str, str, str | None, int]:
    """(role, message JSON, search text, tool_call_id, has_cjk) for one wire message;
    ``canonical``: ``canonical_json(wire_form(message))`` when the caller has it already."""
    wire = wire_form(message)
    text = safe_text(searchable_text(wire))
    tool_call_id = wire.get("tool_call_id")
    return (safe_text(str(wire.get("role", ""))), encode_json(wire, canonical), text,
            safe_text(str(tool_call_id)) if tool_call_id is not None else None,
            1 if text_has_cjk(text) else 0)


def reply_key(message: Message) -> str:
    """What the window-candidate index holds of an assistant row: the start of its search
    text, as ``message_columns`` stores it (empty: nothing to look up)."""
    return safe_text(searchable_text(wire_form(message)))[:REPLY_KEY_CHARS]


def to_session(row: sqlite3.Row | tuple[Any, ...]) -> Session:
    return Session(
        id=row[0], title=row[1], parent_session_id=row[2], link_kind=row[3], source=row[4],
        model=row[5], owner=row[6], started_at=row[7], ended_at=row[8], end_reason=row[9],
        message_count=row[10], input_tokens=row[11], output_tokens=row[12],
        cache_read_tokens=row[13], cost_usd=row[14], fork_seq=row[15])


def to_message(row: sqlite3.Row | tuple[Any, ...]) -> StoredMessage:
    return StoredMessage(session_id=row[0], seq=row[1], message=json.loads(row[2]),
                         identity=row[3], token_count=row[4], created_at=row[5],
                         active=bool(row[6]))


def to_checkpoint(row: sqlite3.Row | tuple[Any, ...]) -> Checkpoint:
    return Checkpoint(
        id=row[0], session_id=row[1], summary=row[2], first_seq=row[3], last_seq=row[4],
        tail_start_seq=row[5], anchors=list(json.loads(row[6])), tokens_before=row[7],
        tokens_after=row[8], summarizer=row[9], status=row[10], summary_role=row[11],
        details=dict(json.loads(row[12])), created_at=row[13])


def to_rewind(row: sqlite3.Row | tuple[Any, ...]) -> RewindRecord:
    return RewindRecord(id=row[0], session_id=row[1], from_seq=row[2], count=row[3],
                        created_at=row[4], undone=bool(row[5]))


def to_event(row: sqlite3.Row | tuple[Any, ...]) -> Event:
    return Event(id=row[0], session_id=row[1], kind=row[2], payload=json.loads(row[3]),
                 created_at=row[4])
