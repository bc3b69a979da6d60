"""Server-sent events of a chat completion: split into events, and fold deltas into one message.

The one reader of ``chat.completion.chunk`` streams, for the proxy (``refold.server``: it
forwards a stream event by event as it arrives and folds the chunks on the side, so the reply
can be recorded when the stream ends) and for ``refold chat`` (``refold.llm.stream``): content,
reasoning and ``tool_calls`` deltas merged by index (or by id, for servers that send none:
``add_call``). Splitting tolerates CRLF and events cut anywhere across network reads; the
common event (one ``data: `` line) costs one slice.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from operator import itemgetter
from typing import Any

from refold import fastjson
from refold._records import dataclass, field
from refold.messages.model import Message, copy_json
from refold.messages.validate import repair_strings

DONE = "[DONE]"


class Event(tuple):
    """One event, ``Event((raw, data))``: ``raw``, its bytes normalized to LF and ending with
    a blank line, and ``data``, the joined ``data:`` payload (None if it has none). A tuple
    read by ``itemgetter``: made and read at C speed (one per streamed chunk)."""

    __slots__ = ()
    raw: bytes = property(itemgetter(0))  # type: ignore[assignment]
    data: str | None = property(itemgetter(1))  # type: ignore[assignment]


class EventSplitter:
    """Feed raw bytes, get complete events back; a partial event waits for the next feed."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[Event]:
        buffer = self._buffer + chunk if self._buffer else chunk
        if buffer.find(b"\r") >= 0:  # (not ``in``: see refold.fastjson)
            # a CR at the very end may be the first half of a CRLF: keep it for the next feed
            tail = b"\r" if buffer.endswith(b"\r") else b""
            body = buffer[:-1] if tail else buffer
            buffer = body.replace(b"\r\n", b"\n").replace(b"\r", b"\n") + tail
        events: list[Event] = []
        start = 0
        while True:
            end = buffer.find(b"\n\n", start)
            if end < 0:
                break
            raw = buffer[start:end + 2]
            if raw.startswith(b"data: ") and raw.find(b"\n", 6) == end - start:
                # the usual event, one data line (``_data_of``'s first case, without a call)
                events.append(Event((raw, raw[6:-2].decode("utf-8", "replace"))))
            else:
                events.append(Event((raw, _data_of(raw))))
            start = end + 2
        self._buffer = buffer[start:] if start else buffer
        return events

    def rest(self) -> bytes:
        """Bytes of an unfinished event left when the stream ended."""
        return self._buffer


def _data_of(raw: bytes) -> str | None:
    if raw.startswith(b"data: ") and raw.find(b"\n", 6) == len(raw) - 2:
        return raw[6:-2].decode("utf-8", "replace")  # the usual event: one data line
    lines = [line[5:].removeprefix(b" ") for line in raw.split(b"\n") if line.startswith(b"data:")]
    if not lines:
        return None
    return b"\n".join(lines).decode("utf-8", "replace")


@dataclass
class CallParts:
    """One tool call as its streamed deltas spelled it so far."""

    id: str = ""
    type: str = "function"
    name: str = ""
    arguments: str = ""


def add_call(calls: dict[int, CallParts], last: int | None, call: Any,
             position: int = 0) -> int | None:
    """Fold one streamed ``tool_calls`` delta into ``calls``; the key it went to (``last``
    for a delta that is not an object: nothing is added).

    A delta with an ``index`` goes to that call. One without (some OpenAI-compatible servers
    send each call whole in its own chunk, no index) continues the last call, unless its
    ``id`` differs from that call's or it is not the first call of its delta (``position``):
    then it starts a new one (after every key so far). A ``name`` equal to the name already
    held (servers that repeat it in every fragment) is not appended again."""
    if not isinstance(call, dict):
        return last
    call_id = call.get("id")
    key = _index_of(call.get("index"))
    if key is None:
        held = calls.get(last) if last is not None else None
        if last is None or held is None or position > 0 or (
                call_id and held.id and str(call_id) != held.id):
            key = max(calls) + 1 if calls else 0
        else:
            key = last
    parts = calls.get(key)
    if parts is None:
        parts = calls[key] = CallParts()
    if call_id:
        parts.id = str(call_id)
    if call.get("type"):
        parts.type = str(call["type"])
    function = call.get("function")
    if isinstance(function, dict):
        name = function.get("name")
        if name and str(name) != parts.name:
            parts.name += str(name)
        arguments = function.get("arguments")
        if arguments:
            parts.arguments += str(arguments)
    return key


def _index_of(value: Any) -> int | None:
    if type(value) is int:
        return value
    try:
        return int(value) if value is not None and not isinstance(value, bool) else None
    except (TypeError, ValueError):
        return None


WHOLE_REPLY = "_refold_whole_reply"
"""A chunk key: the whole reply, as a translating upstream client read it from the upstream's
own message (``server.anthropic_upstream``: an Anthropic stream's blocks, which the chat deltas
glue together); it takes the place of what the deltas fold into."""


@dataclass
class StreamAssembler:
    """Folds ``chat.completion.chunk`` objects (choice 0) into one assistant message (or takes
    a chunk's ``WHOLE_REPLY``)."""

    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: dict[int, CallParts] = field(default_factory=dict)
    last_call: int | None = None  # the key in ``calls`` the last tool-call delta went to
    thinking_blocks: list[dict[str, Any]] = field(default_factory=list)  # signed, whole
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    model: str | None = None
    chunks: int = 0
    whole: dict[str, Any] | None = None  # a chunk's WHOLE_REPLY

    def add(self, chunk: dict[str, Any]) -> None:
        self.chunks += 1
        if WHOLE_REPLY in chunk and isinstance(chunk[WHOLE_REPLY], dict):
            self.whole = chunk[WHOLE_REPLY]
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        if isinstance(chunk.get("model"), str):
            self.model = chunk["model"]
        for choice in chunk.get("choices") or ():
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                delta = choice.get("delta")
                if type(delta) is dict and not choice.get("finish_reason") and (
                        len(delta) == 1 or (len(delta) == 2 and "role" in delta)) \
                        and type(delta.get("content")) is str:
                    self.content.append(delta["content"])  # the usual chunk: text only
                    continue  # (what ``_add_choice`` does with it, without a call)
                self._add_choice(choice)

    def _add_choice(self, choice: dict[str, Any]) -> None:
        if choice.get("finish_reason"):
            self.finish_reason = str(choice["finish_reason"])
        delta = choice.get("delta") or {}
        content = delta.get("content")
        if isinstance(content, str):
            self.content.append(content)
            if len(delta) == 1 or (len(delta) == 2 and "role" in delta):
                return  # the usual chunk: text only (the rest below would find nothing)
        for key in ("reasoning_content", "reasoning"):
            if isinstance(delta.get(key), str):
                self.reasoning.append(delta[key])
        for position, call in enumerate(delta.get("tool_calls") or []):
            self.last_call = add_call(self.calls, self.last_call, call, position)
        if isinstance(delta.get("thinking_blocks"), list):  # LiteLLM's key: Anthropic's blocks
            self.thinking_blocks.extend(b for b in delta["thinking_blocks"] if isinstance(b, dict))


    @property
    def complete(self) -> bool:
        """True once the upstream said why it stopped (a finish_reason arrived)."""
        return self.finish_reason is not None

    def message(self) -> Message:
        """The assistant message the stream spelled out so far."""
        if self.whole is not None:
            return repair_strings(copy_json(self.whole))
        text = "".join(self.content)
        message: Message = {"role": "assistant", "content": text or None}
        if self.calls:
            message["tool_calls"] = [
                {"id": p.id, "type": p.type, "function": {"name": p.name, "arguments": p.arguments}}
                for _, p in sorted(self.calls.items())]
        if self.reasoning:
            message["reasoning_content"] = "".join(self.reasoning)
        if self.thinking_blocks:
            message["thinking_blocks"] = list(self.thinking_blocks)
        # an emoji's surrogate pair split across two chunks (each escaped alone) joined, a
        # lone one U+FFFD: stored, counted and sent as UTF-8, a lone surrogate broke the turn
        return repair_strings(message)


# the json module's own scanner (its C one where built): ``json.loads`` minus its Python-level
# wrapping, which is a third of the cost of a small chunk (a long reply is hundreds of them)
_scan: Callable[[str, int], tuple[Any, int]] = (
    json.JSONDecoder().scan_once)  # type: ignore[attr-defined]  # (typeshed omits it)


def parse_chunk(data: str) -> dict[str, Any] | None:
    """A chunk object from an event's data, or None for anything that is not one (what
    ``json.loads`` would say: a value with whitespace around it or anything after it takes
    that slower path; orjson reads it first where it agrees, ``refold.fastjson``)."""
    value = fastjson.loads_text(data)
    if value is not None:
        return value if isinstance(value, dict) else None
    try:
        value, end = _scan(data, 0)
    except (StopIteration, ValueError):
        end = -1
    if end != len(data):
        try:
            value = json.loads(data)
        except ValueError:
            return None
    return value if isinstance(value, dict) else None
