"""Hermes-Agent's session database (``~/.hermes/state.db``), read as the conversations said.

Hermes keeps every session in one SQLite file: a ``sessions`` row each (``id``, ``source`` —
cli, telegram, … —, ``model``, ``title``, ``started_at``, ``parent_session_id``, token
counters, cost) and its ``messages`` in insertion order (``id``), each ``role``, ``content``
(a string, or ``"\\x00json:"`` and the JSON of a list of parts), ``tool_calls`` (JSON),
``tool_call_id``, ``reasoning`` / ``reasoning_content``, ``timestamp`` (epoch seconds), and two
flags:

- ``active = 0, compacted = 0``: rewound (the user took the turn back) — left out, counted;
- ``active = 0, compacted = 1``: summarized away by an in-place compaction — kept: it was said.

A compaction (in place, or the older rotation into a child session whose parent ended with
``end_reason = 'compression'``) writes Hermes' own block after the turns it replaced: copies of
the first turns (the protected head), a summary message (its text opens with Hermes'
``[CONTEXT COMPACTION`` or ``[CONTEXT SUMMARY]:`` marker), and copies of the last turns. The
summary is Hermes' artifact, not something said: left out, counted. The copies are left out
only where they are exactly that — the run just before a summary that repeats the
conversation's first messages in order, and the run just after it that repeats the messages
before that head, in order — so a turn that happens to repeat an earlier one is never dropped.
A child session is read after its lineage (parents first), so its copies are recognised across
the rotation and only its own turns are kept.

The file is opened read-only (``mode=ro``): Hermes may be running, and nothing here writes to
it. Older Hermes versions lack some columns; those read as absent.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from refold.errors import MessageValidationError
from refold.messages.agent_db import AgentSession, columns, holds, read_only
from refold.messages.model import Message
from refold.messages.validate import validate_message
from refold.pricing import token_count

JSON_PREFIX = "\x00json:"
SUMMARY_MARKERS = ("[CONTEXT COMPACTION", "[CONTEXT SUMMARY]:")
ROLES = frozenset({"system", "user", "assistant", "tool"})
_SESSION_COLUMNS = ("id", "source", "model", "title", "started_at", "parent_session_id",
                    "end_reason", "model_config", "input_tokens", "output_tokens",
                    "cache_read_tokens", "estimated_cost_usd", "actual_cost_usd")
_MESSAGE_COLUMNS = ("id", "session_id", "role", "content", "tool_call_id", "tool_calls",
                    "reasoning", "reasoning_content", "timestamp", "active", "compacted")


SCHEMA = {"sessions": {"id", "source", "started_at"},
          "messages": {"session_id", "role", "content", "timestamp"}}


def is_state_db(path: str | Path) -> bool:
    """True when ``path`` is a SQLite file holding Hermes' ``sessions`` and ``messages``."""
    return holds(path, SCHEMA)


def read_state(path: str | Path) -> list[AgentSession]:
    """Every session of a Hermes ``state.db`` (see the module doc), parents before children."""
    sessions, rows = read_only(path, SCHEMA, "Hermes-Agent", "~/.hermes/state.db",
                               lambda conn: (_session_rows(conn), _message_rows(conn)))
    by_session: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_session.setdefault(str(row["session_id"]), []).append(row)
    for sid in by_session:  # messages whose session row is gone were said all the same
        sessions.setdefault(sid, {"id": sid})
    out: list[AgentSession] = []
    said: dict[str, list[dict[str, Any]]] = {}  # each session's lineage, as read (for copies)
    for info in _parents_first(sessions):
        session = _session_of(info, sessions)
        lineage = said.get(session.parent_id or "", []) if session.link_kind else []
        kept = _read_rows(by_session.get(session.native_id, []), lineage, session.skipped)
        said[session.native_id] = lineage + kept
        for row in kept:
            message = _message_of(row, session.skipped)
            if message is not None:
                session.messages.append(message)
                session.times.append(_seconds(row.get("timestamp")))
        out.append(session)
    return out


# -- the file ------------------------------------------------------------------------------------
def _select(conn: sqlite3.Connection, table: str, wanted: Sequence[str], tail: str
            ) -> list[dict[str, Any]]:
    """``wanted`` columns of ``table`` (NULL for those this Hermes version lacks)."""
    have = columns(conn, table)
    listed = ", ".join(c if c in have else f"NULL AS {c}" for c in wanted)
    return [dict(r) for r in conn.execute(f"SELECT {listed} FROM {table} {tail}")]


def _session_rows(conn: sqlite3.Connection) -> dict[str, dict[str, Any]]:
    rows = _select(conn, "sessions", _SESSION_COLUMNS, "ORDER BY started_at, id")
    return {str(r["id"]): r for r in rows}


def _message_rows(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    # insertion order (id), never timestamp: Hermes stamps rows with a clock that can step back
    return _select(conn, "messages", _MESSAGE_COLUMNS, "ORDER BY id")


def _parents_first(sessions: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Sessions ordered so that each comes after the session it continues."""
    out: list[dict[str, Any]] = []
    placed: set[str] = set()

    def place(sid: str, seen: set[str]) -> None:
        if sid in placed or sid in seen or sid not in sessions:
            return
        parent = sessions[sid].get("parent_session_id")
        if parent:
            place(str(parent), seen | {sid})
        placed.add(sid)
        out.append(sessions[sid])

    for sid in sessions:
        place(sid, set())
    return out


def _session_of(info: dict[str, Any], sessions: dict[str, dict[str, Any]]) -> AgentSession:
    parent = info.get("parent_session_id")
    parent = str(parent) if parent and str(parent) in sessions else None
    link = None
    if parent is not None:
        if _branched(info.get("model_config")):
            link = "branch"
        elif sessions[parent].get("end_reason") == "compression":
            link = "compaction"
    cost = info.get("actual_cost_usd")
    if not isinstance(cost, int | float) or cost <= 0:
        cost = info.get("estimated_cost_usd")
    totals = {"input_tokens": token_count(info.get("input_tokens")),
              "output_tokens": token_count(info.get("output_tokens")),
              "cache_read_tokens": token_count(info.get("cache_read_tokens")),
              "cost_usd": float(cost) if isinstance(cost, int | float) and 0 <= cost < 1e9
              else 0.0}
    title = info.get("title")
    return AgentSession(
        native_id=str(info["id"]), source=_text(info.get("source")),
        model=_text(info.get("model")), title=_text(title),
        started_at=_seconds(info.get("started_at")), parent_id=parent, link_kind=link,
        totals=totals)


def _branched(model_config: Any) -> bool:
    try:
        config = json.loads(model_config) if isinstance(model_config, str) else model_config
    except ValueError:
        return False
    return isinstance(config, dict) and config.get("_branched_from") is not None


# -- which rows were said ------------------------------------------------------------------------
def _read_rows(rows: list[dict[str, Any]], lineage: list[dict[str, Any]],
               skipped: Counter[str]) -> list[dict[str, Any]]:
    """The rows of one session that were said (see the module doc), in order."""
    live = []
    for row in rows:
        if row.get("active") == 0 and not row.get("compacted"):  # NULL: a Hermes before them
            skipped["rewound"] += 1
        else:
            live.append(row)
    whole = lineage + live  # copies refer to the conversation's start, across rotations
    drop: set[int] = set()
    for at in range(len(lineage), len(whole)):
        if _is_summary(whole[at]):
            drop.add(at)
            skipped["compaction summary"] += 1
            copies = _compaction_copies(whole, at, drop)
            drop |= copies
            skipped["compaction copy"] += len(copies)
    return [row for at, row in enumerate(whole) if at >= len(lineage) and at not in drop]


def _compaction_copies(whole: list[dict[str, Any]], summary: int, drop: set[int]) -> set[int]:
    """Positions of the head copied just before ``whole[summary]`` and the tail copied just
    after it: exact repeats, in order, of the conversation's first messages and of the
    messages that preceded that head. Each run is found by aligning its first message with
    the places it occurs (longest first), so a long session costs no more than its repeats."""
    said = [at for at in range(summary) if at not in drop]
    keys = [_key(whole[at]) for at in said]
    head = 0  # the longest run ending just before the summary that repeats the first messages
    if keys:
        for start in range((len(keys) + 1) // 2, len(keys)):
            if keys[start] == keys[0] and keys[start:] == keys[:len(keys) - start]:
                head = len(keys) - start
                break
    before = keys[:len(keys) - head]  # what was said before that head
    after = []
    for at in range(summary + 1, len(whole)):
        if _is_summary(whole[at]):
            break
        after.append(at)
    tail = 0  # the longest run just after the summary that repeats the end of ``before``
    if after and before:
        first = _key(whole[after[0]])
        for start in range(max(0, len(before) - len(after)), len(before)):
            size = len(before) - start
            if before[start] == first and \
                    [_key(whole[at]) for at in after[:size]] == before[start:]:
                tail = size
                break
    return set(said[len(said) - head:]) | set(after[:tail])


def _is_summary(row: dict[str, Any]) -> bool:
    content = _content(row.get("content"))
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    return text.lstrip().startswith(SUMMARY_MARKERS) and row.get("role") != "tool"


def _key(row: dict[str, Any]) -> tuple[Any, ...]:
    return (row.get("role"), row.get("content"), row.get("tool_call_id"), row.get("tool_calls"))


# -- one message ---------------------------------------------------------------------------------
def _message_of(row: dict[str, Any], skipped: Counter[str]) -> Message | None:
    """A row as an OpenAI-form message, validated; None (counted) when it cannot be one."""
    role = row.get("role")
    if role not in ROLES:
        skipped[f"{role} row"] += 1
        return None
    message: dict[str, Any] = {"role": role, "content": _content(row.get("content"))}
    if role == "tool":
        if not row.get("tool_call_id"):
            skipped["tool result without a call id"] += 1
            return None
        message["tool_call_id"] = str(row["tool_call_id"])
    if role == "assistant":
        calls = _tool_calls(row.get("tool_calls"))
        if calls:
            message["tool_calls"] = calls
        reasoning = row.get("reasoning_content") or row.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            message["reasoning_content"] = reasoning
    try:
        return validate_message(message)
    except MessageValidationError:
        pass
    message["content"] = _flat(message["content"])  # parts refold cannot take: their text
    if not message["content"] and role == "user":
        skipped["unreadable row"] += 1
        return None
    try:
        return validate_message(message)
    except MessageValidationError:
        skipped["unreadable row"] += 1
        return None


def _content(raw: Any) -> Any:
    if isinstance(raw, str) and raw.startswith(JSON_PREFIX):
        try:
            return json.loads(raw[len(JSON_PREFIX):])
        except ValueError:
            return raw
    if isinstance(raw, bytes):
        return raw.decode("utf-8", "replace")
    if raw is None or isinstance(raw, str | list):
        return raw
    return str(raw)


def _flat(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(str(p.get("text")) for p in content
                         if isinstance(p, dict) and isinstance(p.get("text"), str))
    return "" if content is None else content if isinstance(content, str) else \
        json.dumps(content, ensure_ascii=False)


def _tool_calls(raw: Any) -> list[dict[str, Any]]:
    """Hermes' ``tool_calls`` JSON as OpenAI tool calls (arguments as a JSON string)."""
    try:
        calls = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return []
    out = []
    for call in calls if isinstance(calls, list) else []:
        if not isinstance(call, dict):
            continue
        inner = call.get("function")
        function: dict[str, Any] = inner if isinstance(inner, dict) else call
        arguments = function.get("arguments", "")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        name = function.get("name")
        if not isinstance(name, str) or not call.get("id"):
            continue
        out.append({"id": str(call["id"]), "type": "function",
                    "function": {"name": name, "arguments": arguments}})
    return out


def _seconds(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < 1e11:
        return float(value)
    return None


def _text(value: Any) -> str | None:
    return value.strip() or None if isinstance(value, str) else None


__all__ = ["is_state_db", "read_state"]
