"""Validation of chat-completions messages, with errors that say which message, field and problem.

``validate_messages`` checks the shape providers enforce and returns the messages with one
documented repair applied: text that cannot be encoded as UTF-8 (lone surrogates, e.g. from a
JSON ``"\\ud800"`` escape) has each bad code point replaced by U+FFFD, because neither SQLite
FTS nor PostgreSQL can store it and every provider rejects it. Everything else that is wrong
raises ``MessageValidationError(index=, field=)``; ``index`` is the 0-based list position.

Rules (decided here, relied on by the store, compaction and the converters):
- roles: system, developer, user, assistant, tool (the legacy "function" role is refused).
- content: a string, ``None`` (assistant only, and only with tool calls or reasoning), or a list
  of parts. Part types per role: user — text, image_url (http(s) URL or ``data:`` URI),
  input_audio, file; assistant — text, refusal; system, developer, tool — text.
- tool_calls (assistant only): a list of ``{"id", "type": "function", "function": {"name",
  "arguments"}}`` with unique, non-empty ids. ``arguments`` must be a string; a string that is
  not valid JSON is *accepted* (models emit truncated JSON and providers pass it through), and
  ``invalid_tool_arguments`` lists such calls for callers who want to flag them.
- tool messages need a non-empty ``tool_call_id``; ``name`` is a string when present;
  ``reasoning`` / ``reasoning_content`` are strings when present. Unknown keys are kept as they
  are (providers add fields faster than validators), and ``_`` keys are in-process metadata.

Loading transcripts from files lives in ``refold.messages.load``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import Any, NoReturn

from refold.errors import MessageValidationError
from refold.messages.model import ROLES, Message, as_plain

REPLACEMENT = "\ufffd"
_SURROGATE = re.compile("[\ud800-\udfff]")

PART_TYPES: dict[str, frozenset[str]] = {
    "system": frozenset({"text"}),
    "developer": frozenset({"text"}),
    "tool": frozenset({"text"}),
    "assistant": frozenset({"text", "refusal"}),
    "user": frozenset({"text", "image_url", "input_audio", "file"}),
}


def repair_text(text: str) -> str:
    """``text`` with lone surrogates replaced by U+FFFD (valid surrogate pairs are joined)."""
    if text.isascii() or not _SURROGATE.search(text):
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


# a lone surrogate in JSON bytes: escaped (``\ud83d``) or as the bytes a "surrogatepass"
# decoding turns into one (not valid UTF-8)
SURROGATE_IN_JSON = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")
_SURROGATE_IN_TEXT = re.compile(r"\\u[dD][89a-fA-F]")


def repair_json_value(value: Any, raw: bytes | str) -> Any:
    """``value`` parsed from ``raw`` with lone surrogates repaired (``repair_text``) wherever
    it holds one: an upstream reply or a request body's fields other than its messages (a
    model name, a tool's description) are stored, counted and encoded as UTF-8, which a lone
    surrogate breaks. ``raw`` is scanned first (C speed): most JSON holds no escape of one."""
    found = (_SURROGATE_IN_TEXT.search(raw) or _SURROGATE.search(raw)) if isinstance(raw, str) \
        else SURROGATE_IN_JSON.search(raw)
    return _repair_value(value) if found else value


def repair_strings(value: Any) -> Any:
    """``value`` (JSON-like) with every string ``repair_text``ed; ``value`` itself when none
    holds a lone surrogate (copied only on change)."""
    return _repair_value(value)


def _repair_value(value: Any) -> Any:
    """Apply ``repair_text`` to every string inside a JSON-like value (copying only on change)."""
    if isinstance(value, str):
        return repair_text(value)
    if isinstance(value, list):
        items = [_repair_value(v) for v in value]
        return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
    if isinstance(value, dict):
        pairs = {repair_text(k): _repair_value(v) for k, v in value.items()}
        same = all(pairs.get(k) is v for k, v in value.items())
        return value if same else pairs
    return value


def _needs_repair(value: Any) -> bool:
    """Whether ``_repair_value`` would change anything in ``value``: a string holding a
    surrogate (``repair_text`` returns a new string for exactly those). Plain loops with the
    strings tested in place, not ``any()`` over generators: it runs on every message."""
    if isinstance(value, str):
        return not value.isascii() and _SURROGATE.search(value) is not None
    if isinstance(value, dict):
        for key in value:  # (a list or a dict is never a key)
            if isinstance(key, str) and not key.isascii() and _SURROGATE.search(key):
                return True
        value = value.values()
    elif not isinstance(value, list):
        return False
    for item in value:
        if isinstance(item, str):
            if not item.isascii() and _SURROGATE.search(item) is not None:
                return True
        elif isinstance(item, (list, dict)) and _needs_repair(item):
            return True
    return False


def _fail(problem: str, index: int | None, field: str, hint: str | None = None) -> NoReturn:
    raise MessageValidationError(problem, index=index, field=field, hint=hint)


def _check_data_or_url(url: Any, index: int | None, field: str) -> None:
    if not isinstance(url, str) or not url:
        _fail("must be a non-empty string", index, field)
    if url.startswith("data:"):
        if ";base64," not in url[:200] or not url.split(",", 1)[1]:
            _fail("a data URI must look like data:<media type>;base64,<data>", index, field)
    elif not url.startswith(("http://", "https://")):
        _fail(f"must be an http(s) URL or a data: URI, not {url[:40]!r}", index, field)


def _check_part(part: Any, role: str, index: int | None, field: str) -> None:
    if not isinstance(part, dict):
        _fail(f"a content part must be an object, not {type(part).__name__}", index, field)
    kind = part.get("type")
    allowed = PART_TYPES[role]
    if not isinstance(kind, str) or kind not in allowed:
        _fail(f"part type {kind!r} is not allowed in {role} messages",
              index, f"{field}.type", hint="allowed: " + ", ".join(sorted(allowed)))
    if kind in ("text", "refusal"):
        if not isinstance(part.get(kind), str):
            _fail(f"a {kind} part needs a string '{kind}'", index, f"{field}.{kind}")
    elif kind == "image_url":
        image = part.get("image_url")
        if not isinstance(image, dict):
            _fail("must be an object with a 'url'", index, f"{field}.image_url")
        _check_data_or_url(image.get("url"), index, f"{field}.image_url.url")
    elif kind == "input_audio":
        audio = part.get("input_audio")
        if not isinstance(audio, dict) or not isinstance(audio.get("data"), str) \
                or not isinstance(audio.get("format"), str):
            _fail("must be an object with string 'data' (base64) and 'format'",
                  index, f"{field}.input_audio")
    elif kind == "file":
        file = part.get("file")
        if not isinstance(file, dict) or not (
                isinstance(file.get("file_id"), str) or isinstance(file.get("file_data"), str)):
            _fail("must be an object with a 'file_id' or 'file_data' string", index,
                  f"{field}.file")


def _check_content(message: Message, role: str, index: int | None) -> None:
    content = message.get("content")
    if content is None:
        if role == "assistant":
            if not (message.get("tool_calls") or message.get("reasoning")
                    or message.get("reasoning_content") or message.get("function_call")
                    or message.get("audio")):
                _fail("an assistant message needs content, tool_calls or reasoning",
                      index, "content")
            return
        _fail(f"a {role} message needs content (a string or a list of parts)", index,
              "content", hint='use "" for an empty message')
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        _fail(f"must be a string or a list of parts, not {type(content).__name__}",
              index, "content")
    for i, part in enumerate(content):
        _check_part(part, role, index, f"content[{i}]")


def _check_tool_calls(message: Message, role: str, index: int | None) -> None:
    calls = message.get("tool_calls")
    if calls is None:
        return
    if role != "assistant":
        _fail(f"only assistant messages carry tool_calls, not {role}", index, "tool_calls")
    if not isinstance(calls, list):
        _fail(f"must be a list, not {type(calls).__name__}", index, "tool_calls")
    seen: set[str] = set()
    for i, call in enumerate(calls):
        where = f"tool_calls[{i}]"
        if not isinstance(call, dict):
            _fail("a tool call must be an object", index, where)
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id:
            _fail("needs a non-empty string id", index, f"{where}.id")
        if call_id in seen:
            _fail(f"duplicate tool call id {call_id!r}", index, f"{where}.id")
        seen.add(call_id)
        if call.get("type", "function") != "function":
            _fail(f"type must be 'function', not {call.get('type')!r}", index, f"{where}.type")
        fn = call.get("function")
        if not isinstance(fn, dict):
            _fail("needs a 'function' object with name and arguments", index,
                  f"{where}.function")
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            _fail("needs a non-empty string name", index, f"{where}.function.name")
        if not isinstance(fn.get("arguments"), str):
            _fail("arguments must be a JSON string, not "
                  f"{type(fn.get('arguments')).__name__}", index,
                  f"{where}.function.arguments", hint="serialize them with json.dumps")


def _check_scalars(message: Message, role: str, index: int | None) -> None:
    if role == "tool":
        call_id = message.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            _fail("a tool message needs a non-empty string tool_call_id", index, "tool_call_id")
    elif "tool_call_id" in message and message["tool_call_id"] is not None:
        _fail(f"only tool messages carry tool_call_id, not {role}", index, "tool_call_id")
    for key in ("name", "reasoning", "reasoning_content"):
        value = message.get(key)
        if value is not None and not isinstance(value, str):
            _fail(f"must be a string, not {type(value).__name__}", index, key)


_TEXT_ROLES = ROLES - {"tool"}  # a role whose message may be only its text


def validate_message(message: Any, index: int | None = None) -> Message:
    """Check one message; return it (a repaired copy if it held lone surrogates). A client
    SDK's message object (``response.choices[0].message``) is taken as its plain form."""
    if type(message) is dict and len(message) == 2:  # the usual one: {"role", "content": text}
        role, content = message.get("role"), message.get("content")
        if type(content) is str and type(role) is str and role in _TEXT_ROLES \
                and (content.isascii() or _SURROGATE.search(content) is None):
            return message  # (what the checks below find valid and leave unrepaired)
    if not isinstance(message, dict):
        message = as_plain(message)
    if not isinstance(message, dict):
        _fail(f"a message must be a JSON object, not {type(message).__name__}", index, "")
    role = message.get("role")
    if not isinstance(role, str) or role not in ROLES:
        hint = "use 'tool' with tool_call_id" if role == "function" else \
            "one of: " + ", ".join(sorted(ROLES))
        if "role" not in message:  # not a message at all ({"foo": 1}, a settings file)
            keys = ", ".join(repr(k) for k in list(message)[:5]) or "none"
            _fail(f"no role: a message needs one (this object's keys: {keys})", index, "role",
                  hint=hint)
        _fail(f"unknown role {role!r}", index, "role", hint=hint)
    _check_content(message, role, index)
    _check_tool_calls(message, role, index)
    _check_scalars(message, role, index)
    if not _needs_repair(message):
        return message  # what _repair_value returns then, without copying on the way
    repaired: Message = _repair_value(message)
    return repaired


def validate_messages(messages: Iterable[Any]) -> list[Message]:
    """Check every message (raising on the first problem); return them, text repaired."""
    if isinstance(messages, str | bytes | dict):
        raise MessageValidationError("expected a list of messages, not "
                                     f"{type(messages).__name__}")
    return [validate_message(m, i) for i, m in enumerate(messages)]


def invalid_tool_arguments(messages: Sequence[Message]) -> list[tuple[int, str]]:
    """``(message index, tool call id)`` of every tool call whose arguments are not JSON."""
    out: list[tuple[int, str]] = []
    for i, message in enumerate(messages):
        for call in message.get("tool_calls") or []:
            try:
                json.loads((call.get("function") or {}).get("arguments") or "{}")
            except (TypeError, ValueError):
                out.append((i, str(call.get("id", ""))))
    return out
