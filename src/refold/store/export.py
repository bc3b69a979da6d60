"""Export a session, or its whole lineage, as JSONL, JSON or Markdown — through the Store Protocol.

Backend-agnostic: only ``Store`` methods are used, so SQLite and PostgreSQL export the same way.

Formats:
- ``jsonl``: one OpenAI chat-completions message per line (wire form, nothing else), ready to be
  re-imported (``refold import``) or fed to any OpenAI-compatible tool.
- ``json``: one object ``{"format": "refold.export/1", "sessions": [...]}``; each session carries
  its metadata and its messages with ``seq``, ``active``, ``created_at``, ``token_count`` and
  ``identity`` next to the wire ``message``.
- ``markdown``: a readable transcript; rewound rows are marked.

The system prompt a session's client sent (``refold serve``, ``Session.prepare(system_prompt=…)``)
is recorded as a ``system_prompt`` event, not a row: a session whose exported rows do not start
with a system message gets its latest recorded prompt as a first system message in ``jsonl``
(what every request of it carried) and a "system prompt" section in ``markdown``; ``json``
keeps the rows as they are and lists the recorded prompts in ``system_prompts`` (``refold
import`` records them again, once). Before, no format held it.

Lineage: the session's ancestors, root first, then the session. A fork or branch child already
holds copies of its parent's messages up to ``fork_seq``, so a parent followed by a fork/branch
link contributes no messages of its own (no message is exported twice); compaction parents
contribute all theirs. Rewound (inactive) rows are included only with ``include_inactive``.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any, Literal, TextIO

from refold._records import asdict, dataclass
from refold.errors import InvalidInput
from refold.messages.model import content_text, wire_form
from refold.store.base import Event, Session, Store, StoredMessage

ExportFormat = Literal["jsonl", "json", "markdown"]
FORMATS: tuple[str, ...] = ("jsonl", "json", "markdown")


@dataclass(frozen=True)
class ExportPart:
    """One session of an export and whether its own messages are part of it."""

    session: Session
    include_messages: bool


def lineage_parts(store: Store, session_id: str, *, lineage: bool = False) -> list[ExportPart]:
    """The sessions an export covers, root first."""
    session = store.get_session(session_id)
    if not lineage:
        return [ExportPart(session, True)]
    chain = [*reversed(store.ancestors(session_id)), session]
    parts = []
    for index, current in enumerate(chain):
        child = chain[index + 1] if index + 1 < len(chain) else None
        copied_by_child = child is not None and child.link_kind in ("fork", "branch")
        parts.append(ExportPart(current, not copied_by_child))
    return parts


def _messages(store: Store, part: ExportPart, include_inactive: bool) -> Iterator[StoredMessage]:
    if part.include_messages:
        yield from store.iter_messages(part.session.id, include_inactive=include_inactive)


def write_export(store: Store, session_id: str, out: TextIO, fmt: str = "jsonl", *,
                 lineage: bool = False, include_inactive: bool = False) -> int:
    """Write the export to ``out``; returns how many messages were written."""
    if fmt not in FORMATS:
        raise InvalidInput(f"unknown export format {fmt!r}", hint="use jsonl, json or markdown")
    parts = lineage_parts(store, session_id, lineage=lineage)
    writer = {"jsonl": _write_jsonl, "json": _write_json, "markdown": _write_markdown}[fmt]
    return writer(store, parts, out, include_inactive)


def export_text(store: Store, session_id: str, fmt: str = "jsonl", *, lineage: bool = False,
                include_inactive: bool = False) -> str:
    """The export as one string (``write_export`` streams instead)."""
    buffer = io.StringIO()
    write_export(store, session_id, buffer, fmt, lineage=lineage,
                 include_inactive=include_inactive)
    return buffer.getvalue()


def _dumps(value: Any, **kw: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, **kw)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: keep them as \\u escapes, losslessly
        text = json.dumps(value, ensure_ascii=True, **kw)
    return text


def recorded_prompts(store: Store, session_id: str) -> list[Event]:
    """The system prompts recorded for the session (``system_prompt`` events), oldest first."""
    return [e for e in store.list_events(session_id, "system_prompt")
            if isinstance(e.payload.get("text"), str) and e.payload["text"]]


def _opens_with_system(store: Store, part: ExportPart, include_inactive: bool) -> bool:
    """Whether the part's first exported row is a system message (then it says it)."""
    first = store.get_messages(part.session.id, include_inactive=include_inactive, limit=1)
    return bool(first) and first[0].role == "system"


def _lead_prompt(store: Store, parts: list[ExportPart], include_inactive: bool) -> str | None:
    """The system message a JSONL export starts with: the latest prompt recorded for the
    exported session (else for the nearest ancestor that has one), when its rows do not start
    with one of their own."""
    first = next((p for p in parts if p.include_messages), None)
    if first is None or _opens_with_system(store, first, include_inactive):
        return None
    for part in reversed(parts):
        prompts = recorded_prompts(store, part.session.id)
        if prompts:
            return str(prompts[-1].payload["text"])
    return None


def _write_jsonl(store: Store, parts: list[ExportPart], out: TextIO,
                 include_inactive: bool) -> int:
    count = 0
    lead = _lead_prompt(store, parts, include_inactive)
    if lead is not None:
        # keys in the order a stored row's come out (sorted): imported into another archive,
        # it is that row, and its export this line byte for byte
        out.write(_dumps({"role": "system", "content": lead}, sort_keys=True) + "\n")
        count += 1
    for part in parts:
        for stored in _messages(store, part, include_inactive):
            out.write(_dumps(wire_form(stored.message)) + "\n")
            count += 1
    return count


def _message_record(stored: StoredMessage) -> dict[str, Any]:
    return {"seq": stored.seq, "active": stored.active, "created_at": stored.created_at,
            "token_count": stored.token_count, "identity": stored.identity,
            "message": wire_form(stored.message)}


def _write_json(store: Store, parts: list[ExportPart], out: TextIO,
                include_inactive: bool) -> int:
    sessions = []
    count = 0
    for part in parts:
        messages = [_message_record(m) for m in _messages(store, part, include_inactive)]
        count += len(messages)
        prompts = [{"text": e.payload["text"], "created_at": e.created_at}
                   for e in recorded_prompts(store, part.session.id)]
        sessions.append({**asdict(part.session), "messages": messages,
                         **({"system_prompts": prompts} if prompts else {})})
    out.write(_dumps({"format": "refold.export/1", "sessions": sessions}, indent=2) + "\n")
    return count


def _write_markdown(store: Store, parts: list[ExportPart], out: TextIO,
                    include_inactive: bool) -> int:
    count = 0
    for part in parts:
        session = part.session
        out.write(f"# {session.title or 'Untitled session'}\n\n")
        out.write(f"- id: `{session.id}`\n")
        if session.parent_session_id:
            out.write(f"- parent: `{session.parent_session_id}` ({session.link_kind})\n")
        if not part.include_messages:
            out.write("- messages: copied into the fork/branch below\n")
        out.write("\n")
        prompts = recorded_prompts(store, session.id)
        if prompts and part.include_messages and not _opens_with_system(store, part,
                                                                       include_inactive):
            changed = f" (the latest of {len(prompts)})" if len(prompts) > 1 else ""
            out.write(f"## system prompt{changed}\n\n{prompts[-1].payload['text']}\n\n")
        for stored in _messages(store, part, include_inactive):
            out.write(_markdown_message(stored))
            count += 1
    return count


def _markdown_message(stored: StoredMessage) -> str:
    message = stored.message
    head = f"## {stored.seq} · {stored.role}"
    if message.get("name"):
        head += f" ({message['name']})"
    if not stored.active:
        head += " — rewound"
    lines = [head, ""]
    if message.get("tool_call_id"):
        lines += [f"Result of tool call `{message['tool_call_id']}`:", ""]
    text = content_text(message)
    if text:
        lines += [text, ""]
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        lines += [f"Tool call `{call.get('id', '')}`: `{fn.get('name', '')}`", "",
                  "```json", str(fn.get("arguments", "")), "```", ""]
    return "\n".join(lines) + "\n"
