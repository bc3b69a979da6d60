"""Loading transcripts: a JSON list of messages, ``{"messages": [...]}``, or JSONL.

Accepted inputs (format detected from the content, not the file name):
- a JSON array of messages;
- a JSON object with a ``messages`` array (an OpenAI request body works as is);
- JSONL: one message object per line (blank lines ignored).

``load_anthropic`` reads the Anthropic Messages form instead (``{"system", "messages"}``, a
list of turns, or JSONL with one turn per line) and converts it with ``from_anthropic``.

Every message is checked with ``validate_message``; the first problem raises
``MessageValidationError`` naming the line (JSONL, 1-based) or the message index (JSON, 0-based),
so a caller can refuse the whole file and store nothing partial. Bytes that are not valid UTF-8
are replaced with U+FFFD (the same documented repair as lone surrogates) and logged as a warning.
JSONL files are read line by line, so a large export never needs two copies in memory.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from refold.errors import InvalidInput, MessageValidationError
from refold.messages.anthropic import from_anthropic
from refold.messages.model import Message
from refold.messages.validate import validate_message

log = logging.getLogger(__name__)


def _decode(data: str | bytes, source_name: str) -> str:
    if isinstance(data, str):
        return data.removeprefix("\ufeff")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        log.warning("%s: invalid UTF-8 replaced with U+FFFD", source_name)
        return data.decode("utf-8-sig", "replace")


def _messages_from_document(doc: Any, source_name: str) -> list[Message]:
    if isinstance(doc, dict) and "messages" in doc:
        doc = doc["messages"]
        if not isinstance(doc, list):
            raise InvalidInput(f"{source_name}: 'messages' must be a list")
    elif isinstance(doc, dict) and "role" in doc:
        doc = [doc]
    if not isinstance(doc, list):
        raise InvalidInput(f"{source_name}: expected a list of messages, an object with "
                           "'messages', or JSONL (one message per line)")
    out: list[Message] = []
    for i, item in enumerate(doc):
        try:
            out.append(validate_message(item, i))
        except MessageValidationError as exc:
            located = _located(exc, f"{source_name}: ", line=None)
            if _looks_anthropic(doc):
                located.hint = "it looks like the Anthropic format: load it with " \
                               "load_anthropic / refold import --format anthropic"
            raise located from exc
    return out


_ANTHROPIC_BLOCKS = frozenset({"tool_use", "tool_result", "thinking", "redacted_thinking",
                               "image", "document"})


def _looks_anthropic(items: list[Any]) -> bool:
    for item in items:
        content = item.get("content") if isinstance(item, dict) else None
        if isinstance(content, list) and any(
                isinstance(b, dict) and b.get("type") in _ANTHROPIC_BLOCKS for b in content):
            return True
    return False


def _located(exc: MessageValidationError, prefix: str,
             line: int | None) -> MessageValidationError:
    """The same error with the source (and line) in front; index and field are kept."""
    out = MessageValidationError(prefix + exc.message, hint=exc.hint)
    out.index, out.field = exc.index, exc.field
    out.details.update(index=exc.index, field=exc.field, line=line)
    return out


def _parse_line(line: str, lineno: int, source_name: str) -> Message:
    try:
        item = json.loads(line)
    except ValueError as exc:
        raise InvalidInput(f"{source_name} line {lineno}: not valid JSON ({exc})",
                           hint="each line must be one JSON message object") from exc
    try:
        return validate_message(item, None)
    except MessageValidationError as exc:
        raise _located(exc, f"{source_name} line {lineno}: ", line=lineno) from exc


def _iter_jsonl(lines: Iterable[str], source_name: str) -> Iterator[Message]:
    for lineno, line in enumerate(lines, start=1):
        if line.strip():
            yield _parse_line(line, lineno, source_name)


def _first_line_is_message(text: str) -> bool:
    first = text.lstrip().split("\n", 1)[0]
    try:
        item = json.loads(first)
    except ValueError:
        return False
    return isinstance(item, dict) and "messages" not in item


def load_messages(data: str | bytes, *, source_name: str = "<input>") -> list[Message]:
    """Parse and validate a transcript given as text or bytes (see the module docstring)."""
    text = _decode(data, source_name)
    stripped = text.lstrip()
    if not stripped:
        raise InvalidInput(f"{source_name}: no messages (the input is empty)")
    if stripped[0] == "{" and _first_line_is_message(stripped) and "\n" in stripped.strip():
        return list(_iter_jsonl(text.splitlines(), source_name))
    try:
        doc = json.loads(text)
    except ValueError as exc:
        if stripped[0] == "{" and _first_line_is_message(stripped):
            return list(_iter_jsonl(text.splitlines(), source_name))
        where = f" at line {exc.lineno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise InvalidInput(f"{source_name}: not valid JSON{where} ({exc})",
                           hint="give a JSON list of messages, {\"messages\": [...]}, "
                                "or JSONL") from exc
    return _messages_from_document(doc, source_name)


def _json_or_jsonl(text: str, source_name: str) -> Any:
    """A whole JSON document, or the list of objects of a JSONL text (no validation)."""
    if not text.strip():
        raise InvalidInput(f"{source_name}: no messages (the input is empty)")
    try:
        return json.loads(text)
    except ValueError:
        pass
    items = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                items.append(json.loads(line))
            except ValueError as exc:
                raise InvalidInput(f"{source_name} line {lineno}: not valid JSON ({exc})") from exc
    return items


def load_anthropic(data: str | bytes, *, source_name: str = "<input>") -> list[Message]:
    """Parse an Anthropic Messages transcript and return it in the OpenAI form, validated."""
    doc = _json_or_jsonl(_decode(data, source_name), source_name)
    system = None
    if isinstance(doc, dict) and "messages" in doc:
        doc, system = doc["messages"], doc.get("system")
    elif isinstance(doc, dict):
        doc = [doc]
    if not isinstance(doc, list):
        raise InvalidInput(f"{source_name}: expected Anthropic messages (a list of turns or "
                           '{"system": ..., "messages": [...]})')
    try:
        converted = from_anthropic(doc, system=system)
    except MessageValidationError as exc:
        raise _located(exc, f"{source_name}: Anthropic ", line=None) from exc
    try:
        return [validate_message(m, i) for i, m in enumerate(converted)]
    except MessageValidationError as exc:
        raise _located(exc, f"{source_name} (after conversion): ", line=None) from exc


def _open_text(path: Path) -> Any:
    try:
        return path.open("r", encoding="utf-8-sig", errors="replace", newline=None)
    except FileNotFoundError as exc:
        raise InvalidInput(f"no such file: {path}", hint="check the path") from exc
    except IsADirectoryError as exc:
        raise InvalidInput(f"{path} is a directory, not a transcript file") from exc
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror or exc}") from exc


def load_messages_file(path: str | Path, *, fmt: str = "openai") -> list[Message]:
    """Load a transcript file; JSONL is streamed line by line, JSON documents read whole.

    ``fmt`` is ``"openai"`` (the default) or ``"anthropic"`` (see ``load_anthropic``).
    """
    if fmt not in ("openai", "anthropic"):
        raise InvalidInput(f"unknown transcript format {fmt!r}", hint="use openai or anthropic")
    path = Path(path).expanduser()
    if path.is_dir():
        raise InvalidInput(f"{path} is a directory, not a transcript file")
    with _open_text(path) as fh:
        try:
            if fmt == "anthropic":
                return load_anthropic(fh.read(), source_name=path.name)
            return _load_open_file(fh, path.name)
        except OSError as exc:
            raise InvalidInput(f"cannot read {path}: {exc.strerror or exc}") from exc


def _load_open_file(fh: Any, source_name: str) -> list[Message]:
    skipped = 0
    head = fh.readline()
    while head and not head.strip():
        skipped += 1
        head = fh.readline()
    if not (head.lstrip().startswith("{") and _first_line_is_message(head)):
        return load_messages(head + fh.read(), source_name=source_name)
    out = [_parse_line(head, skipped + 1, source_name)]
    for lineno, line in enumerate(fh, start=skipped + 2):
        if line.strip():
            out.append(_parse_line(line, lineno, source_name))
    return out
