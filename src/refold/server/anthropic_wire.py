"""Anthropic Messages on the wire: requests to the chat form, replies and streams back.

refold's turn pipeline speaks chat completions (``server.completions``); ``/v1/messages`` is
a translation around it, so sessions, compaction, memory, the ledger and tenancy are the same
code for both APIs. This module is the pure half: no I/O, no app.

- ``chat_request(body)`` checks an Anthropic request and returns the chat-completions body
  the pipeline takes. ``system`` and ``messages`` go through ``refold.messages.anthropic``.
  ``cache_control`` markers are taken *off* the blocks first: Claude Code moves its cache
  breakpoint to the newest message every turn, and a marker inside the content would change a
  message's identity, so the re-sent history would look edited. The markers ride along in
  ``PRIVATE`` (with the request fields the chat form has no place for) and an Anthropic
  upstream puts them back (``server.anthropic_upstream``); an OpenAI-compatible upstream gets
  neither. A ``system`` given as blocks rides along whole (billing block and markers
  included, with the text the chat form made of it), so an Anthropic upstream gets the
  client's blocks as they came. So does each ``system`` turn inside ``messages`` (Claude
  Code's agent list and reminders, ``mid-conversation-system`` beta): in the chat form it is
  a system message in place; ``system_turns`` keeps its content as sent and where it is, so
  an Anthropic upstream gets it back in place.
- ``anthropic_message(completion)`` is a chat completion as an Anthropic ``message``;
  ``StreamTranslator`` turns the pipeline's ``chat.completion.chunk`` stream into Anthropic's
  event sequence (``message_start``, ``ping``, ``content_block_start/delta/stop``,
  ``message_delta``, ``message_stop``; an ``error`` event for a failure mid-stream).
  ``message_stop`` leaves only with the pipeline's ``[DONE]``, i.e. after the reply is stored.
- ``anthropic_error(status, openai_body)`` is any refold error in Anthropic's shape.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Iterator
from typing import Any

from refold._records import dataclass, field
from refold.errors import InvalidInput, MessageValidationError
from refold.jsonscan import anthropic_blocks
from refold.llm.sse import CallParts, add_call
from refold.messages.anthropic import from_anthropic, system_text, tool_input
from refold.messages.model import Message, content_text, copy_json
from refold.pricing import token_count
from refold.server.wire import OVERLOADED, chat_functions, output_limit

PRIVATE = "_refold_anthropic"  # request side: what an Anthropic upstream needs besides the chat form
REPLY = "_refold_anthropic_reply"  # reply side: the upstream's own message, passed through
EVENTS = "_refold_anthropic_events"  # stream side: the upstream's own events, passed through

_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use",
                 "function_call": "tool_use", "content_filter": "refusal"}
FINISH_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length",
                  "tool_use": "tool_calls", "pause_turn": "stop", "refusal": "content_filter",
                  "model_context_window_exceeded": "length"}

_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                403: "permission_error", 404: "not_found_error", 409: "invalid_request_error",
                413: "request_too_large", 429: "rate_limit_error", 529: "overloaded_error"}


# -- requests ----------------------------------------------------------------------------------

@dataclass
class CacheMarks:
    """Where the client put ``cache_control``: (turn counted from the end, block index)."""

    messages: list[tuple[int, int, dict[str, Any]]] = field(default_factory=list)
    system: dict[str, Any] | None = None  # the last marker on a system block

    def as_json(self) -> dict[str, Any]:
        return {"messages": [list(m) for m in self.messages], "system": self.system}


def _unmarked(blocks: list[Any]) -> tuple[list[Any], list[tuple[int, Any]]]:
    """``blocks`` without their ``cache_control`` keys (the list itself when none has one;
    else a new list, each marked block a copy without it), and (index, marker) of each."""
    found = [(i, b["cache_control"]) for i, b in enumerate(blocks)
             if isinstance(b, dict) and "cache_control" in b]
    if not found:
        return blocks, []
    out = list(blocks)
    for index, _ in found:
        out[index] = {k: v for k, v in blocks[index].items() if k != "cache_control"}
    return out, found


def strip_cache_control(body: dict[str, Any]) -> tuple[dict[str, Any], CacheMarks]:
    """The request with no ``cache_control`` in system or messages, and where they were.

    ``body`` is left as it is: only the lists and blocks that held a marker are copied (a
    long conversation's history is not: Claude Code marks the last turn or two), so what has
    none is shared with ``body``; the caller must not change ``clean`` in place."""
    clean = dict(body)
    marks = CacheMarks()
    system = clean.get("system")
    if isinstance(system, list):
        clean["system"], found = _unmarked(system)
        if found:
            marks.system = found[-1][1]
    turns = clean.get("messages")
    if not isinstance(turns, list):
        return clean, marks
    copied: list[Any] | None = None
    hits = anthropic_blocks(turns)  # the turns with a marker, found in C (where it is built)
    for position in (hits[0] if hits is not None else range(len(turns))):
        turn = turns[position]
        content = turn.get("content") if isinstance(turn, dict) else None
        if not isinstance(content, list):
            continue
        blocks, found = _unmarked(content)
        if not found:
            continue
        if copied is None:
            copied = list(turns)
        copied[position] = {**turn, "content": blocks}
        if turn.get("role") != "system":
            place = _place(turns, position)
            marks.messages += [(place, index, marker) for index, marker in found]
    if copied is not None:
        clean["messages"] = copied
    return clean, marks


def _place(turns: list[Any], position: int) -> int:
    """A turn's place counted from the end among the user and assistant turns an Anthropic
    upstream gets back: a ``system`` turn in the conversation (Claude Code appends reminders
    so) goes into ``system`` or in place, keeping its own markers, and counted, it moved every
    marker before it one turn back (onto a thinking block: a 400)."""
    return sum(1 for turn in itertools.islice(turns, position, None)
               if not (isinstance(turn, dict) and turn.get("role") == "system"))


BILLING_PREFIX = "x-anthropic-billing-header:"


def split_billing(clean: dict[str, Any]) -> list[dict[str, Any]]:
    """Take Claude Code's per-request billing block (``x-anthropic-billing-header: …;
    cch=…``, different in every request) out of ``system``: inside the chat form it would
    give every request its own derived session and defeat every prefix cache. An Anthropic
    upstream gets it back, first, as sent."""
    system = clean.get("system")
    if not isinstance(system, list):
        return []
    head = [b for b in system if isinstance(b, dict)
            and str(b.get("text", "")).startswith(BILLING_PREFIX)]
    clean["system"] = [b for b in system if not any(b is h for h in head)]
    return head


def _check(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise InvalidInput("the request body must be a JSON object")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise InvalidInput("model: Field required")
    if not isinstance(body.get("max_tokens"), int) or isinstance(body["max_tokens"], bool):
        raise InvalidInput("max_tokens: Field required (an integer)")
    if not isinstance(body.get("messages"), list) or not body["messages"]:
        raise InvalidInput("messages: a non-empty list of messages is required")
    return body


def chat_messages(body: dict[str, Any]) -> list[Message]:
    """The request's system and messages in the chat form (InvalidInput if malformed)."""
    try:
        return from_anthropic(body["messages"], system=body.get("system"), memo=True)
    except MessageValidationError as exc:
        raise InvalidInput(f"messages: {exc}") from exc


def neighbour(message: Message | None) -> list[Any] | None:
    """What ``system_turns`` records of the message before or after a system turn."""
    return None if message is None else [message.get("role"), message.get("tool_call_id")]


def system_turns(sent: list[Any], chat: list[Message]) -> list[dict[str, Any]]:
    """The client's ``system`` turns inside ``messages``, each with its content as sent (its
    blocks and their ``cache_control``) and its place in the chat form ``chat``: how many
    chat messages follow it (``after``: counted from the end, as a compacted head does not
    shift it), its text, and the role (and tool call) of the chat message before and after
    it. Each such turn is one system message of ``chat``, the last ones in it (only the
    top-level ``system`` comes before them)."""
    turns = [t for t in sent if isinstance(t, dict) and t.get("role") == "system"]
    if not turns:
        return []
    places = [i for i, m in enumerate(chat) if m.get("role") == "system"][-len(turns):]
    return [{"after": len(chat) - 1 - i, "text": content_text(chat[i]),
             "content": copy_json(turn.get("content")),
             "before": neighbour(chat[i - 1] if i else None),
             "next": neighbour(chat[i + 1] if i + 1 < len(chat) else None)}
            for turn, i in zip(turns, places, strict=True)]


def chat_tools(tools: Any) -> list[dict[str, Any]] | None:
    """Custom tools as chat-completions functions; server tools (web search, …) have none."""
    return chat_functions(tools, _function_of)


def _function_of(tool: Any) -> dict[str, Any] | None:
    if not isinstance(tool, dict) or "name" not in tool:
        raise InvalidInput("each tool must be an object with a name")
    if tool.get("type") not in (None, "custom") or "input_schema" not in tool:
        return None
    function = {"name": tool["name"], "parameters": tool["input_schema"]}
    if tool.get("description"):
        function["description"] = tool["description"]
    return function


def _tool_choice(choice: Any) -> Any:
    """Anthropic's ``tool_choice`` as chat's; None when not given. One the Messages API would
    refuse is a 400 here too (a string, an unknown type, a ``tool`` without its name went
    upstream dropped or as a function named None, or failed with a 500)."""
    if choice is None:
        return None
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind == "tool" and isinstance(choice.get("name"), str) and choice["name"]:
        return {"type": "function", "function": {"name": choice["name"]}}
    if kind in ("auto", "any", "none"):
        return {"auto": "auto", "any": "required", "none": "none"}[kind]
    raise InvalidInput(f"tool_choice: {choice!r:.200} is not one of {{\"type\": \"auto\"}}, "
                       "{\"type\": \"any\"}, {\"type\": \"none\"} or {\"type\": \"tool\", "
                       "\"name\": …}")


def _output_config(body: dict[str, Any], out: dict[str, Any]) -> None:
    """Anthropic's structured output (``output_config.format`` or ``output_format``: a JSON
    schema) as chat's ``response_format``: Claude Code asks for its titles as JSON so, and a
    chat upstream never heard of it. (Its ``effort`` is not passed on: chat's
    ``reasoning_effort`` is refused by models that do not reason, and Claude Code sends it with
    every request.)"""
    config = body.get("output_config")
    wanted = (config.get("format") if isinstance(config, dict) else None) \
        or body.get("output_format")
    if isinstance(wanted, dict) and wanted.get("type") == "json_schema" \
            and isinstance(wanted.get("schema"), dict):
        out["response_format"] = {"type": "json_schema", "json_schema": {
            "name": str(wanted.get("name") or "output"), "schema": wanted["schema"],
            "strict": True}}


def chat_request(raw: Any, *, anthropic_upstream: bool) -> dict[str, Any]:
    """The chat-completions body for an Anthropic request (see the module docstring)."""
    body = _check(raw)
    clean, marks = strip_cache_control(body)
    billing = split_billing(clean)
    out: dict[str, Any] = {"model": body["model"], "messages": chat_messages(clean),
                           **output_limit(body["model"], body["max_tokens"]),
                           "stream": bool(body.get("stream"))}
    if out["stream"]:  # the usage chunk is how message_delta learns its usage
        out["stream_options"] = {"include_usage": True}
    for key in ("temperature", "top_p"):
        if key in body:
            out[key] = body[key]
    if body.get("stop_sequences"):
        out["stop"] = body["stop_sequences"]
    _output_config(body, out)
    tools = chat_tools(body.get("tools"))
    choice = _tool_choice(body.get("tool_choice"))  # (checked with or without tools)
    if tools:
        out["tools"] = tools
        if choice is not None:
            out["tool_choice"] = choice
        if choice is not None and body["tool_choice"].get("disable_parallel_tool_use"):
            out["parallel_tool_calls"] = False
    if anthropic_upstream:
        extra = {k: v for k, v in clean.items() if k not in ("messages", "system", "stream")}
        out[PRIVATE] = {"request": extra, "marks": marks.as_json(), "system_head": billing}
        if isinstance(body.get("system"), list):  # the client's blocks, each with its marker
            out[PRIVATE]["system"] = {"blocks": copy_json(body["system"]),
                                      "text": system_text(clean.get("system"))}
        turns = system_turns(body["messages"], out["messages"])
        if turns:  # (an Anthropic upstream sends them in place when the client's beta says so)
            out[PRIVATE]["turns"] = turns
    return out


# -- replies -----------------------------------------------------------------------------------

def anthropic_usage(usage: Any) -> dict[str, Any]:
    """Chat usage as Anthropic's: cached prompt tokens are reported apart from the rest."""
    usage = usage if isinstance(usage, dict) else {}
    details = usage.get("prompt_tokens_details") or {}
    cached = token_count(details.get("cached_tokens")) if isinstance(details, dict) else 0
    created = token_count(usage.get("cache_creation_input_tokens"))
    return {"input_tokens": max(0, token_count(usage.get("prompt_tokens")) - cached - created),
            "output_tokens": token_count(usage.get("completion_tokens")),
            "cache_creation_input_tokens": created,
            "cache_read_input_tokens": cached}


def message_id(chat_id: Any) -> str:
    text = str(chat_id or "")
    return text if text.startswith("msg_") else "msg_" + (
        text.removeprefix("chatcmpl-") or uuid.uuid4().hex)


def anthropic_message(data: dict[str, Any], model: str) -> dict[str, Any]:
    """A chat completion (or an Anthropic upstream's own message) as an Anthropic message."""
    if isinstance(data.get(REPLY), dict):
        return dict(data[REPLY])
    choice = (data.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    content: list[dict[str, Any]] = []
    if message.get("thinking_blocks"):
        content.extend(message["thinking_blocks"])
    elif message.get("reasoning_content") or message.get("reasoning"):
        text = message.get("reasoning_content") or message.get("reasoning")
        content.append({"type": "thinking", "thinking": text, "signature": ""})
    text = message.get("content")
    if isinstance(text, list):
        text = "".join(str(p.get("text", "")) for p in text if isinstance(p, dict))
    if text:
        content.append({"type": "text", "text": text})
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        content.append({"type": "tool_use", "id": call.get("id"), "name": fn.get("name"),
                        "input": tool_input(str(fn.get("arguments") or ""))})
    return {"id": message_id(data.get("id")), "type": "message", "role": "assistant",
            "model": data.get("model") or model, "content": content,
            "stop_reason": _STOP_REASONS.get(str(choice.get("finish_reason")), "end_turn"),
            "stop_sequence": None, "usage": anthropic_usage(data.get("usage"))}


# -- streams -----------------------------------------------------------------------------------

def sse(event: str, data: dict[str, Any]) -> bytes:
    return (f"event: {event}\ndata: ".encode() + json.dumps(data, ensure_ascii=False).encode()
            + b"\n\n")


class StreamTranslator:
    """Feed ``chat.completion.chunk`` objects; get Anthropic SSE bytes back."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.started = False
        self.passthrough = False
        self.block: str | None = None  # "thinking" | "text" | "tool" while one is open
        self.index = -1
        self.calls: dict[int, CallParts] = {}  # the chat tool calls, by key (``add_call``)
        self.last_call: int | None = None
        self.live: int | None = None  # the call whose tool_use block is open
        self.waiting: list[int] = []  # calls begun while the live one was unfinished
        self.sent: set[int] = set()  # calls whose block is closed
        self.stop_reason = "end_turn"
        self.usage: dict[str, Any] = {}
        self.held_delta: dict[str, Any] | None = None  # an upstream's own message_delta

    def _start(self, chunk: dict[str, Any]) -> Iterator[bytes]:
        self.started = True
        yield sse("message_start", {"type": "message_start", "message": {
            "id": message_id(chunk.get("id")), "type": "message", "role": "assistant",
            "model": chunk.get("model") or self.model, "content": [], "stop_reason": None,
            "stop_sequence": None, "usage": {"input_tokens": 0, "output_tokens": 0}}})
        yield sse("ping", {"type": "ping"})

    def _open(self, kind: str, block: dict[str, Any]) -> Iterator[bytes]:
        if kind != "tool":
            yield from self._flush_calls()  # text after the calls: they are over
        yield from self._close()
        self.index += 1
        self.block = kind
        yield sse("content_block_start", {"type": "content_block_start", "index": self.index,
                                          "content_block": block})

    def _close(self) -> Iterator[bytes]:
        if self.block is not None:
            yield sse("content_block_stop", {"type": "content_block_stop", "index": self.index})
            self.block = None
        if self.live is not None:
            self.sent.add(self.live)
            self.live = None

    def _delta(self, delta: dict[str, Any]) -> bytes:
        return sse("content_block_delta", {"type": "content_block_delta", "index": self.index,
                                           "delta": delta})

    def chunk(self, chunk: dict[str, Any]) -> bytes:
        return b"".join(self._feed(chunk))

    def error(self, status: int, body: dict[str, Any]) -> bytes:
        return error_event(status, body)

    def done(self) -> bytes:
        """The pipeline stored the reply: close the message."""
        return b"".join(self._done())

    def _feed(self, chunk: dict[str, Any]) -> Iterator[bytes]:
        if isinstance(chunk.get(EVENTS), list):  # an Anthropic upstream: its events verbatim
            self.passthrough = True
            for event in chunk[EVENTS]:
                if event.get("type") not in ("message_stop", "message_delta"):
                    yield sse(str(event.get("type")), event)
                self._remember(event)
            return
        if not self.started:
            yield from self._start(chunk)
        if isinstance(chunk.get("usage"), dict):
            self.usage = anthropic_usage(chunk["usage"])
        for choice in chunk.get("choices") or []:
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                yield from self._choice(choice)

    def _remember(self, event: dict[str, Any]) -> None:
        """An upstream's message_delta is held to leave with the stored reply's [DONE]."""
        if event.get("type") == "message_delta":
            self.held_delta = event

    def _choice(self, choice: dict[str, Any]) -> Iterator[bytes]:
        delta = choice.get("delta") or {}
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            if self.block != "thinking":
                yield from self._open("thinking", {"type": "thinking", "thinking": "",
                                                   "signature": ""})
            yield self._delta({"type": "thinking_delta", "thinking": reasoning})
        if isinstance(delta.get("content"), str) and delta["content"]:
            if self.block != "text":
                yield from self._open("text", {"type": "text", "text": ""})
            yield self._delta({"type": "text_delta", "text": delta["content"]})
        for position, call in enumerate(delta.get("tool_calls") or []):
            yield from self._tool_call(call, position)
        if choice.get("finish_reason"):
            self.stop_reason = _STOP_REASONS.get(str(choice["finish_reason"]), "end_turn")

    def _tool_call(self, call: Any, position: int) -> Iterator[bytes]:
        """A tool-call delta. Anthropic's content blocks cannot interleave: the first call
        streams as its deltas come; a call that begins while the open one's arguments are
        not yet a whole JSON value (parallel calls streamed interleaved) waits, and its block
        goes out whole once the calls before it are done (at the end of the stream at the
        latest)."""
        if not isinstance(call, dict):
            return
        key = self.last_call = add_call(self.calls, self.last_call, call, position)
        if key is None or key in self.sent:
            return  # more of a call whose block is closed: nothing to add it to
        if key == self.live:
            fn = call.get("function")
            fragment = fn.get("arguments") if isinstance(fn, dict) else None
            if fragment:
                yield self._delta({"type": "input_json_delta", "partial_json": str(fragment)})
            if self.waiting and _whole_json(self.calls[key].arguments):
                yield from self._next_call()
        elif key not in self.waiting:  # a new call
            if self.live is not None and not (
                    not self.waiting and _whole_json(self.calls[self.live].arguments)):
                self.waiting.append(key)  # the open call may go on: this one waits
            else:
                yield from self._open_call(key)

    def _open_call(self, key: int) -> Iterator[bytes]:
        parts = self.calls[key]
        yield from self._open("tool", {"type": "tool_use", "id": parts.id, "name": parts.name,
                                       "input": {}})
        self.live = key
        if parts.arguments:
            yield self._delta({"type": "input_json_delta", "partial_json": parts.arguments})

    def _next_call(self) -> Iterator[bytes]:
        """The open call is whole: the waiting calls take their turn, each streaming on
        from what it has so far."""
        while self.waiting and (self.live is None
                                or _whole_json(self.calls[self.live].arguments)):
            yield from self._open_call(self.waiting.pop(0))

    def _flush_calls(self) -> Iterator[bytes]:
        """No more fragments will come (the stream ends, or text follows): every call that
        waits goes out whole, in order."""
        if self.live is None and not self.waiting:
            return
        for key in self.waiting:
            yield from self._open_call(key)
        self.waiting = []
        yield from self._close()

    def _done(self) -> Iterator[bytes]:
        if self.passthrough:
            if self.held_delta is not None:
                yield sse("message_delta", self.held_delta)
            yield sse("message_stop", {"type": "message_stop"})
            return
        if not self.started:
            yield from self._start({})
        yield from self._flush_calls()
        yield from self._close()
        usage = self.usage or anthropic_usage(None)
        yield sse("message_delta", {"type": "message_delta", "delta": {
            "stop_reason": self.stop_reason, "stop_sequence": None}, "usage": usage})
        yield sse("message_stop", {"type": "message_stop"})


def _whole_json(text: str) -> bool:
    """Are a call's arguments so far a whole JSON value (so no more fragments of it are to
    come)? The cheap test first: a whole object or array ends with its closing bracket."""
    end = text.rstrip()[-1:]
    if end not in ("}", "]"):
        return False
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


# -- errors ------------------------------------------------------------------------------------

def _overloaded(body: Any) -> bool:
    detail = body.get("error") if isinstance(body, dict) else None
    return isinstance(detail, dict) and detail.get("code") == OVERLOADED


def anthropic_status(status: int, body: Any) -> int:
    """The status of an error in Anthropic's terms: an overloaded upstream is its 529 (the
    chat endpoints' 503), which Claude Code retries as an overload."""
    return 529 if _overloaded(body) else status


def anthropic_error(status: int, body: Any) -> dict[str, Any]:
    """An OpenAI-shaped error body (refold's one renderer) in Anthropic's shape."""
    detail = body.get("error") if isinstance(body, dict) else None
    detail = detail if isinstance(detail, dict) else {}
    status = anthropic_status(status, body)
    kind = _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    message = str(detail.get("message") or f"HTTP {status}")
    return {"type": "error", "error": {"type": kind, "message": message}}


def error_event(status: int, body: Any) -> bytes:
    return sse("error", anthropic_error(status, body))
