"""An Anthropic Messages upstream behind the chat-completions pipeline (``upstream_format =
"anthropic"``).

The pipeline hands every upstream a chat-completions body and expects a chat completion (or a
``chat.completion.chunk`` stream) back; ``AnthropicUpstream`` has ``Upstream``'s interface and
translates both ways at the wire, so everything before it (sessions, compaction, memory, the
record) is unchanged. The prepared messages become Anthropic ``system`` and ``messages``
(``refold.messages.anthropic.to_anthropic``; unsigned reasoning is dropped, which the live API
requires). When the turn came in through ``/v1/messages`` the request carries
``anthropic_wire.PRIVATE``: the client's own fields (``thinking``, server tools, ``metadata``,
``top_k``, …) are sent as they came, its ``cache_control`` markers go back on the same blocks
(counted from the end of the conversation, so a compacted head does not shift them), its
``system`` blocks go back as they came (refold's memory in a block after them), and its
``anthropic-beta``/``anthropic-version`` headers are forwarded. A ``system`` turn the client
put inside ``messages`` under the ``mid-conversation-system`` beta goes back in place, as it
came (``_placed``): folded into ``system``, each new reminder changed the system prompt, so
the provider's cache of the whole conversation was rebuilt, and a note meant for one moment
became a standing instruction. (Without the beta, or where refold's view no longer has it
where the client had it — a compaction moves such turns up to the system prompt — it goes
into ``system`` as before.) The upstream's own message, or
each of its stream events, rides back beside the chat form (``REPLY``/``EVENTS``) so the client
gets it verbatim, while the pipeline records the chat form.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx

from refold.compaction.summary import is_summary_message
from refold.errors import UpstreamError
from refold.llm import classify_http_error, classify_transport_error
from refold.llm.client import json_object
from refold.llm.failures import bad_response
from refold.llm.sse import WHOLE_REPLY, EventSplitter
from refold.messages.anthropic import from_anthropic, server_block, to_anthropic, tool_input
from refold.messages.model import Message, content_text, copy_json
from refold.pricing import token_count
from refold.server.anthropic_wire import EVENTS, FINISH_REASONS, PRIVATE, REPLY, neighbour
from refold.server.upstream import passed_headers

log = logging.getLogger(__name__)

API_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096
_CHAT_BLOCKS = ("text", "thinking", "redacted_thinking", "tool_use")
# the beta under which the Messages API takes ``role: system`` turns inside ``messages``
# (Claude Code sends ``mid-conversation-system-2026-04-07``); not ``…-clear-at-…``, another one
_IN_PLACE_BETA = re.compile(r"^mid-conversation-system-\d{4}-\d{2}-\d{2}$")


# -- requests ----------------------------------------------------------------------------------

def _tools(tools: Any) -> list[dict[str, Any]] | None:
    if not isinstance(tools, list):
        return None
    out = []
    for tool in tools:
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict):
            out.append({"name": fn.get("name"), "description": fn.get("description", ""),
                        "input_schema": fn.get("parameters") or {"type": "object"}})
    return out


def _from_chat_fields(body: dict[str, Any]) -> dict[str, Any]:
    """A chat-completions client's request fields, for an Anthropic upstream."""
    out: dict[str, Any] = {"model": body.get("model"),
                           "max_tokens": body.get("max_tokens") or
                           body.get("max_completion_tokens") or DEFAULT_MAX_TOKENS}
    for key in ("temperature", "top_p"):
        if key in body:
            out[key] = body[key]
    stop = body.get("stop")
    if stop:
        out["stop_sequences"] = [stop] if isinstance(stop, str) else stop
    tools = _tools(body.get("tools"))
    if tools:
        out["tools"] = tools
        choice = _tool_choice(body.get("tool_choice"), body.get("parallel_tool_calls"))
        if choice is not None:
            out["tool_choice"] = choice
    return out


def _tool_choice(choice: Any, parallel: Any) -> dict[str, Any] | None:
    """A chat ``tool_choice`` (and ``parallel_tool_calls: false``) as Anthropic's: they were
    dropped, so a client that required a tool, or named one, got the model's own choice."""
    if choice is None or choice == "auto":
        out: dict[str, Any] = {"type": "auto"}
    elif choice == "required":
        out = {"type": "any"}
    elif choice == "none":
        return {"type": "none"}
    elif isinstance(choice, dict) and choice.get("type") == "function" and isinstance(
            choice.get("function"), dict) and isinstance(choice["function"].get("name"), str):
        out = {"type": "tool", "name": choice["function"]["name"]}
    else:  # (allowed_tools, a custom tool: no Anthropic form; the request is stored by now)
        log.warning("tool_choice %.200r has no Anthropic form: the model chooses", choice)
        out = {"type": "auto"}
    if parallel is False:
        out["disable_parallel_tool_use"] = True
    elif choice is None:
        return None  # nothing asked: the upstream's default
    return out


def _apply_marks(turns: list[dict[str, Any]], marks: list[list[Any]]) -> None:
    for from_end, index, control in marks:
        if not 0 < from_end <= len(turns):
            continue
        turn = turns[-from_end]
        if isinstance(turn["content"], str):
            turn["content"] = [{"type": "text", "text": turn["content"]}]
        if 0 <= index < len(turn["content"]):
            turn["content"][index]["cache_control"] = control


def _client_system(system: str | None, client: Any) -> list[dict[str, Any]] | None:
    """The client's own ``system`` blocks (each with its ``cache_control``, the billing block
    where it was), then what refold adds to the prompt (its memory, a system turn from inside
    the conversation) as one block of its own; None when the prompt sent is not the client's
    followed by additions (then the blocks are rebuilt from the chat form)."""
    if not isinstance(client, dict) or not isinstance(client.get("blocks"), list):
        return None
    blocks, text = copy_json(client["blocks"]), str(client.get("text") or "")
    system = system or ""
    if not text:
        rest = system
    elif system == text or system.startswith(text + "\n\n"):
        rest = system[len(text) + 2:]
    else:
        return None
    return [*blocks, {"type": "text", "text": rest}] if rest else blocks


def _in_place_beta(headers: Any) -> bool:
    beta = headers.get("anthropic-beta") if isinstance(headers, dict) else None
    return isinstance(beta, str) and any(
        _IN_PLACE_BETA.match(name.strip()) for name in beta.split(","))


def _placed(messages: list[Message], private: dict[str, Any]) -> dict[int, Any]:
    """The system messages of ``messages`` (the prepared view) that go to the upstream in
    place, by index, each with the client's content for it: under the beta, each of the
    client's ``system`` turns (``anthropic_wire.system_turns``) that is still where the client
    had it — as many messages after it, the same text, the same roles on either side, none of
    them a summary, and not between a tool call and its results. Compaction moves such turns
    up to the system prompt, and one it left elsewhere (next to the summary it put in) goes
    into ``system`` too: what the upstream gets around a summary is what it got before."""
    turns = private.get("turns")
    if not turns or not _in_place_beta(private.get("headers")):
        return {}
    wanted = {turn["after"]: turn for turn in turns}
    lead = next((i for i, m in enumerate(messages) if m.get("role") not in ("system",
                                                                           "developer")),
                len(messages))
    out: dict[int, Any] = {}
    for index in range(lead, len(messages)):
        message = messages[index]
        turn = wanted.get(len(messages) - 1 - index)
        if message.get("role") != "system" or turn is None \
                or content_text(message) != turn["text"]:
            continue
        before = messages[index - 1]
        after = messages[index + 1] if index + 1 < len(messages) else None
        if neighbour(before) != turn["before"] or neighbour(after) != turn["next"] \
                or is_summary_message(before) or (after and is_summary_message(after)) \
                or before.get("tool_calls") or (after and after.get("role") == "tool"):
            continue
        out[index] = turn["content"]
    return out


def _conversation(messages: list[Message], placed: dict[int, Any]) -> dict[str, Any]:
    """``to_anthropic`` of the prepared messages, with the ``placed`` system messages as
    ``system`` turns where they are (their content as the client sent it) instead of in
    ``system``; the turns on either side of one are not merged across it."""
    if not placed:
        return to_anthropic(messages, drop_unsigned_thinking=True)
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    start = 0
    for index in [*sorted(placed), len(messages)]:
        part = to_anthropic(messages[start:index], drop_unsigned_thinking=True)
        if part.get("system"):
            system.append(part["system"])
        turns += part["messages"]
        if index < len(messages):
            turns.append({"role": "system", "content": copy_json(placed[index])})
        start = index + 1
    out: dict[str, Any] = {"messages": turns}
    if system:
        out["system"] = "\n\n".join(system)
    return out


def anthropic_request(body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The Messages request for a prepared chat body, and headers the client asked to forward."""
    private = body.get(PRIVATE) if isinstance(body.get(PRIVATE), dict) else None
    out = dict(private["request"]) if private else _from_chat_fields(body)
    messages = body.get("messages") or []
    converted = _conversation(messages, _placed(messages, private) if private else {})
    out["messages"] = converted["messages"]
    marks = (private or {}).get("marks") or {}
    # the client's markers are counted among its user and assistant turns: a system turn in
    # place keeps its own
    _apply_marks([t for t in out["messages"] if t["role"] != "system"],
                 marks.get("messages") or [])
    system = converted.get("system")
    head = list((private or {}).get("system_head") or [])
    blocks = _client_system(system, (private or {}).get("system"))
    if blocks is not None:
        out["system"] = blocks
    elif system and (marks.get("system") or head):
        block: dict[str, Any] = {"type": "text", "text": system}
        if marks.get("system"):
            block["cache_control"] = marks["system"]
        out["system"] = [*head, block]
    elif head:
        out["system"] = head
    elif system:
        out["system"] = system
    if body.get("stream"):
        out["stream"] = True
    return out, dict((private or {}).get("headers") or {})


# -- replies -----------------------------------------------------------------------------------

def chat_usage(usage: Any) -> dict[str, Any]:
    usage = usage if isinstance(usage, dict) else {}
    read = token_count(usage.get("cache_read_input_tokens"))
    created = token_count(usage.get("cache_creation_input_tokens"))
    prompt = token_count(usage.get("input_tokens")) + read + created
    completion = token_count(usage.get("output_tokens"))
    out = {"prompt_tokens": prompt, "completion_tokens": completion,
           "total_tokens": prompt + completion, "prompt_tokens_details": {"cached_tokens": read},
           "cache_creation_input_tokens": created}
    split = usage.get("cache_creation")
    if isinstance(split, dict):  # 5-minute and 1-hour writes: priced apart (refold.pricing)
        out["cache_creation"] = {k: token_count(split.get(k)) for k in (
            "ephemeral_5m_input_tokens", "ephemeral_1h_input_tokens")}
    return out


def chat_completion(message: dict[str, Any], passthrough: bool) -> dict[str, Any]:
    """An Anthropic message as a chat completion: server tools' blocks as their text (and the
    blocks themselves under ``KEPT``, as a client re-sending them gets them recorded); blocks of
    any other kind are left out of it (a ``/v1/messages`` client still gets them, from
    ``REPLY``)."""
    blocks = [b for b in message.get("content") or [] if isinstance(b, dict) and (
        b.get("type") in _CHAT_BLOCKS or server_block(b))]
    reply = from_anthropic([{"role": "assistant", "content": blocks}])[0]
    out: dict[str, Any] = {
        "id": message.get("id"), "object": "chat.completion", "model": message.get("model"),
        "choices": [{"index": 0, "message": reply, "finish_reason": FINISH_REASONS.get(
            str(message.get("stop_reason")), "stop")}],
        "usage": chat_usage(message.get("usage"))}
    if passthrough:
        out[REPLY] = message
    return out


class BlockAssembler:
    """An Anthropic stream's content blocks, whole, as its events spell them out."""

    def __init__(self) -> None:
        self.blocks: dict[int, dict[str, Any]] = {}
        self.json: dict[int, str] = {}  # a tool call's input, as streamed so far

    def event(self, event: dict[str, Any]) -> None:
        kind, index = event.get("type"), event.get("index")
        if not isinstance(index, int):
            return
        if kind == "content_block_start" and isinstance(event.get("content_block"), dict):
            self.blocks[index] = copy_json(event["content_block"])
            return
        block = self.blocks.get(index)
        if block is None:
            return
        if kind == "content_block_delta":
            self._delta(index, block, event.get("delta") or {})
        elif kind == "content_block_stop" and index in self.json:
            raw = self.json.pop(index)
            block["input"] = tool_input(raw) if raw.strip() else block.get("input") or {}

    def _delta(self, index: int, block: dict[str, Any], delta: dict[str, Any]) -> None:
        kind = delta.get("type")
        for key, field in (("text_delta", "text"), ("thinking_delta", "thinking"),
                           ("signature_delta", "signature")):
            if kind == key:
                block[field] = str(block.get(field) or "") + str(delta.get(field) or "")
        if kind == "input_json_delta":
            self.json[index] = self.json.get(index, "") + str(delta.get("partial_json") or "")
        elif kind == "citations_delta" and isinstance(delta.get("citation"), dict):
            block["citations"] = [*(block.get("citations") or []), delta["citation"]]

    def content(self) -> list[dict[str, Any]]:
        return [self.blocks[i] for i in sorted(self.blocks)]


class ChunkTranslator:
    """Anthropic stream events to ``chat.completion.chunk`` objects (choice 0). For a
    ``/v1/messages`` client (``passthrough``) the finishing chunk also carries the whole reply
    as the JSON path reads it (``WHOLE_REPLY``, from the upstream's own blocks): the chat
    deltas glue text blocks together and put calls after all text, and the client re-sends the
    blocks as they came, so a reply recorded from the deltas would not be the one it re-sends."""

    def __init__(self, passthrough: bool) -> None:
        self.passthrough = passthrough
        self.id = ""
        self.model = ""
        self.usage: dict[str, Any] = {}
        self.tools = -1  # index of the open tool_use among the message's tool calls
        self.open_tool = False
        self.thinking: dict[str, Any] | None = None  # the open thinking block, accumulated
        self.blocks = BlockAssembler()

    def _chunk(self, event: dict[str, Any], delta: dict[str, Any] | None,
               finish: str | None = None) -> dict[str, Any] | None:
        if delta is None and finish is None and not self.passthrough:
            return None
        chunk: dict[str, Any] = {"id": self.id, "object": "chat.completion.chunk",
                                 "model": self.model, "choices": []}
        if delta is not None or finish is not None:
            chunk["choices"] = [{"index": 0, "delta": delta or {}, "finish_reason": finish}]
        if finish is not None:
            chunk["usage"] = chat_usage(self.usage)
        if self.passthrough:
            chunk[EVENTS] = [event]
        return chunk

    def event(self, event: dict[str, Any]) -> dict[str, Any] | None:
        kind = event.get("type")
        if self.passthrough:
            self.blocks.event(event)
        if kind == "message_start":
            message = event.get("message") or {}
            self.id, self.model = str(message.get("id") or ""), str(message.get("model") or "")
            self.usage = dict(message.get("usage") or {})
            return self._chunk(event, {"role": "assistant", "content": ""})
        if kind == "content_block_start":
            return self._block_start(event)
        if kind == "content_block_delta":
            return self._chunk(event, self._delta(event.get("delta") or {}))
        if kind == "content_block_stop":
            self.open_tool = False
            if self.thinking is not None:  # whole and signed: recorded as sent back later
                block, self.thinking = self.thinking, None
                return self._chunk(event, {"thinking_blocks": [block]})
        if kind == "message_delta":
            self.usage.update({k: v for k, v in (event.get("usage") or {}).items()
                               if v is not None})
            stop = str((event.get("delta") or {}).get("stop_reason"))
            chunk = self._chunk(event, None, FINISH_REASONS.get(stop, "stop"))
            if chunk is not None and self.passthrough:
                whole = {"content": self.blocks.content(), "stop_reason": stop}
                chunk[WHOLE_REPLY] = chat_completion(whole, False)["choices"][0]["message"]
            return chunk
        return self._chunk(event, None)

    def _block_start(self, event: dict[str, Any]) -> dict[str, Any] | None:
        block = event.get("content_block") or {}
        if block.get("type") in ("thinking", "redacted_thinking"):
            self.thinking = dict(block)
        if block.get("type") != "tool_use":
            return self._chunk(event, None)
        self.tools += 1
        self.open_tool = True
        return self._chunk(event, {"tool_calls": [{
            "index": self.tools, "id": block.get("id"), "type": "function",
            "function": {"name": block.get("name"), "arguments": ""}}]})

    def _delta(self, delta: dict[str, Any]) -> dict[str, Any] | None:
        kind = delta.get("type")
        if kind == "text_delta":
            return {"content": delta.get("text", "")}
        if kind == "thinking_delta":
            if self.thinking is not None:
                self.thinking["thinking"] = self.thinking.get("thinking", "") + \
                    delta.get("thinking", "")
            return {"reasoning_content": delta.get("thinking", "")}
        if kind == "signature_delta" and self.thinking is not None:
            self.thinking["signature"] = self.thinking.get("signature", "") + \
                delta.get("signature", "")
        if kind == "input_json_delta" and self.open_tool:
            return {"tool_calls": [{"index": self.tools, "function": {
                "arguments": delta.get("partial_json", "")}}]}
        return None


def _data(chunk: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\n\n"


class AnthropicStream:
    """An Anthropic SSE response, read as the chat-completions stream the pipeline expects."""

    def __init__(self, response: httpx.Response, base_url: str, passthrough: bool) -> None:
        self._response = response
        self._base_url = base_url
        self._translator = ChunkTranslator(passthrough)

    async def chunks(self) -> AsyncIterator[bytes]:
        splitter = EventSplitter()
        try:
            async for data in self._response.aiter_bytes():
                out = b"".join(self._translate(splitter, data))
                if out:
                    yield out
        except httpx.HTTPError as exc:
            raise classify_transport_error(exc, self._base_url) from exc

    def _translate(self, splitter: EventSplitter, data: bytes) -> list[bytes]:
        out: list[bytes] = []
        for raw in splitter.feed(data):
            try:
                event = json.loads(raw.data or "")
            except ValueError:
                continue
            if not isinstance(event, dict):
                continue
            if event.get("type") == "error":
                detail = event.get("error") or {}
                status = 529 if detail.get("type") == "overloaded_error" else 500
                raise classify_http_error(status, json.dumps(event))
            chunk = self._translator.event(event)
            if chunk is not None:
                out.append(_data(chunk))
            if event.get("type") == "message_stop":
                out.append(b"data: [DONE]\n\n")
        return out

    async def aclose(self) -> None:
        await self._response.aclose()


class AnthropicUpstream:
    """``Upstream``'s interface over an Anthropic Messages endpoint (``base_url`` is …/v1)."""

    lean = False
    anthropic = True  # takes the messages' Anthropic blocks (``messages.anthropic.KEPT``)

    def __init__(self, base_url: str, api_key: str | None = None, *,
                 transport: httpx.AsyncBaseTransport | None = None,
                 read_timeout: float = 600.0, connect_timeout: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self._http = httpx.AsyncClient(transport=transport, timeout=httpx.Timeout(
            read_timeout, connect=connect_timeout))

    def _headers(self, bearer: str | None, forwarded: dict[str, str]) -> dict[str, str]:
        headers = {"content-type": "application/json", "anthropic-version": API_VERSION}
        headers.update(forwarded)
        if self.api_key:
            headers["x-api-key"] = self.api_key
        elif bearer and getattr(bearer, "header", "x-api-key") == "authorization":
            headers["authorization"] = f"Bearer {bearer}"  # an OAuth token goes as it came
        elif bearer:
            headers["x-api-key"] = bearer
        return headers

    def _request(self, body: bytes, bearer: str | None) -> tuple[httpx.Request, bool]:
        """The upstream request, and whether the turn came in through ``/v1/messages``."""
        chat = json.loads(body)
        request, forwarded = anthropic_request(chat)
        built = self._http.build_request(
            "POST", self.base_url + "/messages", headers=self._headers(bearer, forwarded),
            content=json.dumps(request, ensure_ascii=False).encode())
        return built, isinstance(chat.get(PRIVATE), dict)

    async def _send(self, request: httpx.Request, stream: bool) -> httpx.Response:
        try:
            response = await self._http.send(request, stream=stream)
        except httpx.HTTPError as exc:
            raise classify_transport_error(exc, self.base_url) from exc
        if response.status_code >= 400:
            await response.aread()
            await response.aclose()
            error = classify_http_error(response.status_code, response.text)
            error.headers = passed_headers(response.headers)  # Retry-After, rate limits
            raise error
        return response

    async def complete(self, body: bytes, bearer: str | None,
                       on_sent: Callable[[], None] | None = None) -> dict[str, Any]:
        request, passthrough = self._request(body, bearer)
        if on_sent is not None:
            on_sent()
        response = await self._send(request, stream=False)
        message = json_object(response.text, response.status_code)
        if message.get("type") != "message":
            raise bad_response("the upstream's reply is not an Anthropic message")
        return chat_completion(message, passthrough)

    async def open_stream(self, body: bytes, bearer: str | None,
                          on_sent: Callable[[], None] | None = None) -> AnthropicStream:
        request, passthrough = self._request(body, bearer)
        if on_sent is not None:
            on_sent()
        response = await self._send(request, stream=True)
        ctype = response.headers.get("content-type", "")
        if "text/event-stream" not in ctype:
            await response.aclose()
            raise bad_response(f"asked for a stream, got {ctype or 'no content type'}",
                               response.status_code)
        return AnthropicStream(response, self.base_url, passthrough)

    async def models(self, bearer: str | None) -> dict[str, Any]:
        request = self._http.build_request("GET", self.base_url + "/models",
                                           headers=self._headers(bearer, {}))
        response = await self._send(request, stream=False)
        listed = json_object(response.text, response.status_code).get("data") or []
        return {"object": "list", "data": [
            {"id": m.get("id"), "object": "model", "created": 0, "owned_by": "anthropic"}
            for m in listed if isinstance(m, dict)]}

    async def aclose(self) -> None:
        await self._http.aclose()


__all__ = ["AnthropicUpstream", "UpstreamError", "anthropic_request", "chat_completion"]
