"""OpenCode's session database (``~/.local/share/opencode/opencode.db``), read as said.

OpenCode 1.x keeps its sessions in one SQLite file: ``session`` (``id``, ``parent_id`` — a
subagent's session names the one that started it —, ``title``, ``time_created`` in ms,
``revert``), ``message`` (``data``: JSON with ``role``; an assistant's ``tokens``, ``modelID``,
``summary``) and ``part`` (``data``: JSON, one part of a message, in id order). A message's
parts become the turns its model saw:

- a user message: its ``text`` parts (``ignored`` ones left out; OpenCode's ``synthetic`` text
  kept — the model read it), its image ``file`` parts as image parts, other files as a line
  naming them;
- an assistant message: each step (``step-start`` … ``step-finish``) one assistant turn — its
  text, its ``reasoning`` as ``reasoning_content``, its ``tool`` parts as tool calls — followed
  by the calls' results: the output of a ``completed`` call, the error text of an ``error``
  one; a call still ``pending`` or ``running`` (interrupted) has none, as in the database.

A compaction is OpenCode's own work, not something said: the user message holding the
``compaction`` part and the assistant's ``summary`` reply are left out and counted (the turns
it summarized stay in the database, and here). Messages from a session's ``revert`` point on
were taken back: left out, counted. Each assistant message's ``tokens`` are its call's usage
(a left-out summary's go with the next message kept). The file is opened read-only.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

from refold.errors import MessageValidationError
from refold.messages.agent_db import AgentSession, holds, read_only
from refold.messages.agent_logs import Spend
from refold.messages.model import Message
from refold.messages.validate import validate_message
from refold.pricing import token_count

SCHEMA = {"session": {"id", "parent_id", "title", "time_created"},
          "message": {"id", "session_id", "data"}, "part": {"message_id", "data"}}


def is_opencode_db(path: str | Path) -> bool:
    """True when ``path`` is a SQLite file holding OpenCode's sessions, messages and parts."""
    return holds(path, SCHEMA)


def read_opencode(path: str | Path) -> list[AgentSession]:
    """Every session of an OpenCode ``opencode.db`` (see the module doc), oldest first."""
    sessions, messages, parts = read_only(
        path, SCHEMA, "OpenCode", "~/.local/share/opencode/opencode.db", _rows)
    by_session: dict[str, list[dict[str, Any]]] = {}
    for message in messages:
        by_session.setdefault(str(message["session_id"]), []).append(message)
    return [_session(info, by_session.get(str(info["id"]), []), parts) for info in sessions]


def _rows(conn: sqlite3.Connection) -> tuple[list[dict[str, Any]], list[dict[str, Any]],
                                             dict[str, list[Any]]]:
    sessions = [dict(r) for r in conn.execute(
        "SELECT id, parent_id, title, time_created, revert FROM session "
        "ORDER BY time_created, id")]
    messages = [dict(r) for r in conn.execute(
        "SELECT id, session_id, time_created, data FROM message ORDER BY time_created, id")]
    parts: dict[str, list[Any]] = {}
    for row in conn.execute("SELECT message_id, data FROM part ORDER BY id"):
        parts.setdefault(str(row[0]), []).append(_json(row[1]))
    return sessions, messages, parts


def _json(raw: Any) -> Any:
    try:
        return json.loads(raw) if isinstance(raw, str | bytes) else None
    except ValueError:
        return None


def _session(info: dict[str, Any], rows: list[dict[str, Any]],
             parts: dict[str, list[Any]]) -> AgentSession:
    title = info.get("title") if isinstance(info.get("title"), str) else None
    session = AgentSession(
        native_id=str(info["id"]), source=None, model=None,
        title=None if not title or title.startswith("New session") else title,
        started_at=_ms(info.get("time_created")), parent_id=None, link_kind=None, spend=[])
    revert = _json(info.get("revert"))
    taken_back = revert.get("messageID") if isinstance(revert, dict) else None
    carried: list[Spend] = []  # the usage of a reply left out, for the next message kept
    for row in rows:
        if taken_back is not None and str(row["id"]) >= str(taken_back):
            session.skipped["reverted"] += 1
            continue
        data = _json(row["data"])
        if not isinstance(data, dict):
            session.skipped["unreadable message"] += 1
            continue
        carried += _usage(data)
        session.model = _model(data) or session.model
        turns = _turns(data, parts.get(str(row["id"]), []), session.skipped)
        at = _ms(row.get("time_created"))
        for turn in turns:
            session.messages.append(turn)
            session.times.append(at)
            assert session.spend is not None
            session.spend.append(carried)
            carried = []
    if carried and session.spend:
        session.spend[-1] = session.spend[-1] + carried
    return session


def _turns(data: dict[str, Any], parts: list[Any], skipped: Counter[str]) -> list[Message]:
    """The turns one OpenCode message holds (see the module doc)."""
    kinds = [p.get("type") for p in parts if isinstance(p, dict)]
    role = data.get("role")
    if role == "user" and "compaction" in kinds:
        skipped["compaction request"] += 1
        return []
    if role == "assistant" and data.get("summary") is True:
        skipped["compaction summary"] += 1
        return []
    if role == "user":
        turn = _user(parts)
        return _valid([turn], skipped) if turn is not None else _none(skipped, "empty message")
    if role == "assistant":
        turns = _assistant(parts)
        return _valid(turns, skipped) if turns else _none(skipped, "empty reply")
    return _none(skipped, f"{role} message")


def _none(skipped: Counter[str], kind: str) -> list[Message]:
    skipped[kind] += 1
    return []


def _user(parts: list[Any]) -> Message | None:
    content: list[dict[str, Any]] = []
    for part in parts:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind == "text" and isinstance(part.get("text"), str) and not part.get("ignored"):
            content.append({"type": "text", "text": part["text"]})
        elif kind == "file":
            content.append(_file(part))
    if not content:
        return None
    if all(p["type"] == "text" for p in content):
        return {"role": "user", "content": "\n\n".join(p["text"] for p in content)}
    return {"role": "user", "content": content}


def _file(part: dict[str, Any]) -> dict[str, Any]:
    url, mime = part.get("url"), part.get("mime")
    if isinstance(url, str) and isinstance(mime, str) and mime.startswith("image/") and \
            url.startswith(("data:", "http://", "https://")):
        return {"type": "image_url", "image_url": {"url": url}}
    name = part.get("filename") or url or "a file"
    return {"type": "text", "text": f"[attached: {name}{f' ({mime})' if mime else ''}]"}


def _assistant(parts: list[Any]) -> list[Message]:
    out: list[Message] = []
    step: dict[str, Any] = {"text": [], "reasoning": [], "calls": []}

    def flush() -> None:
        if not (step["text"] or step["calls"] or step["reasoning"]):
            return
        turn: dict[str, Any] = {"role": "assistant", "content": "".join(step["text"]) or None}
        if step["reasoning"]:
            turn["reasoning_content"] = "".join(step["reasoning"])
        if step["calls"]:
            turn["tool_calls"] = [call for call, _ in step["calls"]]
        out.append(turn)
        out.extend(result for _, result in step["calls"] if result is not None)
        step.update(text=[], reasoning=[], calls=[])

    for part in parts:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind == "step-start":
            flush()
        elif kind == "text" and isinstance(part.get("text"), str) and not part.get("ignored"):
            step["text"].append(part["text"])
        elif kind == "reasoning" and isinstance(part.get("text"), str):
            step["reasoning"].append(part["text"])
        elif kind == "tool" and isinstance(part.get("callID"), str):
            step["calls"].append(_call(part))
    flush()
    return out


def _call(part: dict[str, Any]) -> tuple[dict[str, Any], Message | None]:
    """A tool part as (the call, its result or None when it never finished)."""
    state = part.get("state") if isinstance(part.get("state"), dict) else {}
    assert isinstance(state, dict)
    call = {"id": part["callID"], "type": "function",
            "function": {"name": str(part.get("tool") or "tool"),
                         "arguments": json.dumps(state.get("input") or {}, ensure_ascii=False)}}
    status = state.get("status")
    if status == "completed":
        output = state.get("output")
    elif status == "error":
        output = state.get("error")
    else:
        return call, None
    text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
    return call, {"role": "tool", "tool_call_id": part["callID"], "content": text}


def _valid(turns: list[Message], skipped: Counter[str]) -> list[Message]:
    out = []
    for turn in turns:
        try:
            out.append(validate_message(turn))
        except MessageValidationError:
            skipped["unreadable turn"] += 1
    return out


def _usage(data: dict[str, Any]) -> list[Spend]:
    """An assistant message's call, Anthropic-shaped (OpenCode counts input without the
    cached tokens), with its model; [] for anything else."""
    tokens = data.get("tokens")
    if data.get("role") != "assistant" or not isinstance(tokens, dict):
        return []
    cache = tokens.get("cache") if isinstance(tokens.get("cache"), dict) else {}
    assert isinstance(cache, dict)
    usage = {"input_tokens": token_count(tokens.get("input")),
             "output_tokens": token_count(tokens.get("output")) +
             token_count(tokens.get("reasoning")),
             "cache_read_input_tokens": token_count(cache.get("read")),
             "cache_creation_input_tokens": token_count(cache.get("write"))}
    return [(usage, _model(data))] if any(usage.values()) else []


def _model(data: dict[str, Any]) -> str | None:
    model = data.get("modelID")
    return model if isinstance(model, str) and model else None


def _ms(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < 1e14:
        return float(value) / 1000.0
    return None


__all__ = ["is_opencode_db", "read_opencode"]
