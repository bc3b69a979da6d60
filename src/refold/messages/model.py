"""The canonical message form: OpenAI chat-completions wire JSON, as plain dicts.

A message is a ``dict`` shaped like ``ChatMessage``. refold never wraps messages in classes on
the hot path: compaction, storage and the proxy all pass the same plain dicts, so any caller's
list works as is. Keys starting with ``_`` are in-process metadata and never go on the wire.

Invariant kept here: ``message_identity`` is a pure function of the message's wire content and
the identity of the message before it, so the same history always hashes to the same chain.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from operator import methodcaller
from typing import Any, Literal, NotRequired, TypedDict

from refold.jsonscan import copier

Role = Literal["system", "developer", "user", "assistant", "tool"]
ROLES: frozenset[str] = frozenset({"system", "developer", "user", "assistant", "tool"})


class FunctionCall(TypedDict):
    name: str
    arguments: str


class ToolCall(TypedDict):
    id: str
    type: Literal["function"]
    function: FunctionCall


class ChatMessage(TypedDict, total=False):
    role: Role
    content: str | list[dict[str, Any]] | None
    name: str
    tool_calls: list[ToolCall]
    tool_call_id: str
    reasoning_content: str
    reasoning: NotRequired[str]


Message = dict[str, Any]
"""What every refold function takes: a ``ChatMessage``-shaped dict."""

# The wire keys that define a message's identity (in-process "_" keys are excluded).
IDENTITY_KEYS = ("role", "content", "name", "tool_calls", "tool_call_id")  # what identity hashes
_IDENTITY_KEYS = IDENTITY_KEYS


def wire_form(message: Message) -> Message:
    """Return the message without in-process metadata keys (those starting with ``_``)."""
    if not any(map(_PRIVATE, message)):
        return dict(message)  # (the usual message has none: a copy at C speed)
    return {k: v for k, v in message.items() if not k.startswith("_")}


_PRIVATE = methodcaller("startswith", "_")


def _copy_json(value: Any) -> Any:
    """``copy.deepcopy`` of a JSON value, ~7x faster on messages: dicts and lists copied all
    the way down, strings, numbers, booleans and None shared (immutable); any other value
    goes to ``copy.deepcopy``. (No memo: a container reached twice is copied twice.)"""
    kind = type(value)
    if kind is dict:
        return {k: v if type(v) in _SCALARS else _copy_json(v) for k, v in value.items()}
    if kind is list:
        return [v if type(v) in _SCALARS else _copy_json(v) for v in value]
    if kind in _SCALARS:
        return value
    import copy

    return copy.deepcopy(value)


_SCALARS = frozenset((str, int, float, bool, type(None)))
# the same copy in C where ``refold._jsonscan`` is built (~5x faster on messages)
copy_json: Callable[[Any], Any] = copier() or _copy_json


def as_plain(value: Any) -> Any:
    """A client SDK's object (the ``openai`` or ``anthropic`` SDK's ``ChatCompletionMessage``,
    a tool call, ``CompletionUsage``; any pydantic model) as the plain JSON form refold takes,
    without the fields that are null; anything else is returned as it is. So
    ``rt.record(response.choices[0].message, usage=response.usage)`` works as with dicts."""
    if isinstance(value, dict) or value is None:
        return value
    to_dict = getattr(value, "to_dict", None)  # the SDKs' own: the fields the API sent
    if callable(to_dict) and hasattr(value, "model_fields_set"):
        try:
            plain = to_dict(mode="json", exclude_none=True)
        except TypeError:
            plain = None
        if isinstance(plain, dict):
            return plain
    dump = getattr(value, "model_dump", None)  # any other pydantic (v2) model
    if callable(dump):
        try:
            plain = dump(mode="json", exclude_none=True, by_alias=True)
        except TypeError:
            return value
        if isinstance(plain, dict):
            return plain
    return value


def as_plain_messages(messages: Any) -> Any:
    """``messages`` with each SDK object in it made plain (``as_plain``); the same list when
    every item is a dict already (the common case costs one pass of type checks)."""
    if not isinstance(messages, list | tuple) or set(map(type, messages)) <= {dict}:
        return messages
    return [as_plain(m) for m in messages]


TOOL_IMAGES_NOTE = "[the images of the tool results above]"
"""The text of the user message that carries tool results' images after them (a chat tool
message holds only text): ``/v1/messages`` sends one upstream, ``/v1/responses`` stores one
for Codex's ``view_image`` output. It is the tools' output, not a request."""


def is_tool_images(message: Message) -> bool:
    """A user message carrying the images of the tool results before it (``TOOL_IMAGES_NOTE``):
    no request (no goal, no user turn, no recall query, never pinned as the last request)."""
    content = message.get("content")
    return message.get("role") == "user" and type(content) is list and bool(content) \
        and isinstance(content[0], dict) and content[0].get("text") == TOOL_IMAGES_NOTE


def content_text(message: Message) -> str:
    """The message's text: string content, or the text parts of a parts list joined by newlines."""
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts: list[str] = []
    for part in content:
        if isinstance(part, dict):
            if part.get("type") in ("text", "input_text", "output_text"):
                texts.append(str(part.get("text", "")))
            elif "text" in part and isinstance(part["text"], str):
                texts.append(part["text"])
    return "\n".join(texts)


def searchable_text(message: Message) -> str:
    """Text worth indexing: content plus tool-call names and arguments. A participant's
    ``name`` (a group chat's speaker, an old function result's function) leads it, "Caroline:
    I went ...", so a question naming a speaker finds what that speaker said."""
    name = message.get("name")
    parts = [content_text(message)]
    if isinstance(name, str) and name.strip():
        parts[0] = f"{name.strip()}: {parts[0]}"
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        parts.append(f"{fn.get('name', '')} {fn.get('arguments', '')}")
    return "\n".join(filter(None, parts))


# ``json.dumps`` with options other than its defaults builds a new encoder on every call (a
# third of the cost of a small message's): the hot path encodes with this one, made once
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode


def canonical_json(value: Any) -> str:
    """Stable JSON: sorted keys, no spaces, non-ASCII kept (used for hashing and storage)."""
    return _CANONICAL(value)


def message_identity(message: Message, previous_identity: str | None) -> str:
    """Content hash of ``message`` chained to the identity of the message before it."""
    core = {k: message[k] for k in _IDENTITY_KEYS if k in message and message[k] is not None}
    payload = (previous_identity or "") + "\n" + canonical_json(core)
    return (_SHA256 or _sha256())(payload.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def identity_and_json(message: Message, previous_identity: str | None
                      ) -> tuple[str, str | None]:
    """``message_identity``, and the canonical JSON it hashed when that is the whole message
    (every key an identity key, none null: then ``canonical_json(wire_form(message))`` is that
    same text, and a store need not encode it again), else None."""
    core = {k: message[k] for k in _IDENTITY_KEYS if k in message and message[k] is not None}
    text = canonical_json(core)
    payload = (previous_identity or "") + "\n" + text
    identity = (_SHA256 or _sha256())(payload.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return identity, text if len(core) == len(message) else None


_SHA256: Any = None


def _sha256() -> Any:
    """``hashlib.sha256``, imported at the first identity (its OpenSSL load, 4 ms, is not on
    the path of a search; an import statement per identity cost as much as the hash)."""
    global _SHA256
    import hashlib

    _SHA256 = hashlib.sha256
    return _SHA256


def chain_identities(messages: list[Message], previous_identity: str | None = None) -> list[str]:
    """Identities of a whole list, chained from ``previous_identity``."""
    out: list[str] = []
    prev = previous_identity
    for message in messages:
        prev = message_identity(message, prev)
        out.append(prev)
    return out


def tool_call_ids(message: Message) -> list[str]:
    """The ids of an assistant message's tool calls, in order."""
    return [c.get("id", "") for c in message.get("tool_calls") or []]
