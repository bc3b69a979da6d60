"""OpenAI Responses on the wire: ``input`` items to the chat form, replies and streams back.

The pure half of ``/v1/responses`` (``server.responses_api`` is the endpoint): like
``/v1/messages`` it is a translation around the chat-completions turn pipeline.

- ``input_messages(input)`` (``messages.responses``): a string is one user message; items are
  ``message`` (roles user, system, developer, assistant; ``input_text``/``output_text``/
  ``input_image`` parts), ``function_call``, ``custom_tool_call`` and a client
  ``tool_search_call`` (consecutive calls join one assistant message), their outputs (a tool
  message; the images of a tool's output follow the results in a user message), ``reasoning``
  (its summary becomes the next assistant message's ``reasoning_content``) and
  ``additional_tools`` (no message: its tools are the request's). ``instructions`` is a
  system message in front, for this request only (as the Responses API does, it is not
  carried to a continuation).
- ``chat_body`` builds the chat-completions body; the tools as chat functions and the
  ``tool_choice`` are ``server.responses_tools``'s (custom tools and the client's
  ``tool_search`` among them); ``text.verbosity`` is chat's ``verbosity``, and the
  ``message.output_text.logprobs`` include (with ``top_logprobs``) chat's ``logprobs``, which
  come back in the output text parts (``logprobs_of``).
- ``response_object`` builds the ``response`` object from a chat completion; ``ResponseEvents``
  turns the pipeline's chunk stream into ``response.created``, ``response.in_progress``,
  ``response.output_item.added``/``done``, ``response.content_part.added``/``done``,
  ``response.output_text.delta``/``done``, ``response.function_call_arguments.delta``/``done``,
  ``response.custom_tool_call_input.delta``/``done`` (a custom tool's call: its ``input``,
  decoded from the chat call's one string argument as it streams),
  ``response.reasoning_summary_text.delta`` and ``response.completed`` (once the reply is
  stored), or ``response.failed`` (with the error; the items still open are not done).
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from typing import Any

from refold._records import dataclass, field
from refold.llm.sse import CallParts, add_call
from refold.messages.model import Message
from refold.pricing import token_count
from refold.server.responses_tools import (
    InputDeltas,
    ToolKinds,
    chat_tool_choice,
    custom_input,
    flat,
    function_of,
    reply_item,
    search_arguments,
)
from refold.server.wire import chat_functions, output_limit

LOGPROBS = "message.output_text.logprobs"  # the ``include`` asking for the text's logprobs


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


# -- requests ----------------------------------------------------------------------------------

def chat_tools(tools: Any) -> list[dict[str, Any]] | None:
    """The request's tools as chat functions (``server.responses_tools``): functions, those
    grouped in a ``namespace`` tool among them, custom tools and the client's ``tool_search``
    as functions; the hosted tools left out. A function name given twice is sent once."""
    functions = chat_functions(flat(tools), function_of)
    if functions is None:
        return None
    out: list[dict[str, Any]] = []
    seen: set[Any] = set()
    for function in functions:
        name = function["function"].get("name")
        if isinstance(name, str):
            if name in seen:
                continue
            seen.add(name)
        out.append(function)
    return out


def _response_format(text: Any) -> dict[str, Any] | None:
    fmt = text.get("format") if isinstance(text, dict) else None
    if not isinstance(fmt, dict) or fmt.get("type") in (None, "text"):
        return None
    if fmt.get("type") == "json_object":
        return {"type": "json_object"}
    schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
    return {"type": "json_schema", "json_schema": schema}


def chat_body(body: dict[str, Any], messages: list[Message], model: str,
              tools: Any = None) -> dict[str, Any]:
    """The chat-completions body for a Responses request over ``messages``; ``tools``: the
    request's tools (``responses_tools.request_tools``), its ``tools`` when not given."""
    out: dict[str, Any] = {"model": body.get("model") or model, "messages": messages,
                           "stream": bool(body.get("stream"))}
    if out["stream"]:
        out["stream_options"] = {"include_usage": True}
    # the same fields in chat completions (prompt_cache_key: Codex's conversation id, which
    # routes its turns to the same prompt cache); not ``store`` or ``metadata``, which ask
    # refold to keep the response here, and the upstream to keep the completion there
    for key in ("temperature", "top_p", "parallel_tool_calls", "user", "prompt_cache_key",
                "prompt_cache_retention", "safety_identifier", "service_tier"):
        if body.get(key) is not None:
            out[key] = body[key]
    if LOGPROBS in (body.get("include") or ()):  # the output text's logprobs, and how many
        out["logprobs"] = True  # alternatives each (top_logprobs, 0 when not given)
        if body.get("top_logprobs") is not None:
            out["top_logprobs"] = body["top_logprobs"]
    text = body.get("text")
    if isinstance(text, dict) and text.get("verbosity") is not None:
        out["verbosity"] = text["verbosity"]
    if body.get("max_output_tokens") is not None:  # (max_completion_tokens where required)
        out.update(output_limit(model, body["max_output_tokens"]))
    functions = chat_tools(body.get("tools") if tools is None else tools) or []
    choice = chat_tool_choice(body.get("tool_choice"),
                              {function["function"].get("name") for function in functions})
    if functions:
        out["tools"] = functions
        if choice is not None:
            out["tool_choice"] = choice
    effort = (body.get("reasoning") or {}).get("effort") if isinstance(
        body.get("reasoning"), dict) else None
    if effort:
        out["reasoning_effort"] = effort
    fmt = _response_format(body.get("text"))
    if fmt is not None:
        out["response_format"] = fmt
    return out


# -- replies -----------------------------------------------------------------------------------

def usage_of(usage: Any) -> dict[str, Any]:
    usage = usage if isinstance(usage, dict) else {}
    prompt = token_count(usage.get("prompt_tokens"))
    completion = token_count(usage.get("completion_tokens"))
    details = usage.get("prompt_tokens_details")
    details = details if isinstance(details, dict) else {}
    spent = usage.get("completion_tokens_details")
    reasoning = token_count(spent.get("reasoning_tokens")) if isinstance(spent, dict) else 0
    return {"input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": token_count(details.get("cached_tokens"))},
            "output_tokens": completion,
            "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": prompt + completion}


def text_item(item_id: str, text: str, status: str = "completed",
              logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    part: dict[str, Any] = {"type": "output_text", "text": text, "annotations": []}
    if logprobs:
        part["logprobs"] = logprobs
    return {"type": "message", "id": item_id, "status": status, "role": "assistant",
            "content": [part]}


def _logprob(token: Any) -> dict[str, Any]:
    return {key: token.get(key) for key in ("token", "logprob", "bytes")}


def logprobs_of(choice: Any) -> list[dict[str, Any]]:
    """A chat choice's (or chunk choice's) content logprobs as the Responses ``logprobs`` of
    an output text (the same fields: ``token``, ``logprob``, ``bytes``, ``top_logprobs``)."""
    found = choice.get("logprobs") if isinstance(choice, dict) else None
    tokens = found.get("content") if isinstance(found, dict) else None
    return [dict(_logprob(token), top_logprobs=[
        _logprob(top) for top in token.get("top_logprobs") or () if isinstance(top, dict)])
        for token in tokens or () if isinstance(token, dict)]


_CALL_ITEMS = ("function_call", "custom_tool_call", "tool_search_call")
_PREFIX = {"custom_tool_call": "ctc", "tool_search_call": "tsc"}


def _kind(call: dict[str, Any], kinds: ToolKinds | None) -> str:
    name = (call.get("function") or {}).get("name")
    if kinds is not None and name in kinds.search:
        return "tool_search_call"
    return "custom_tool_call" if kinds is not None and name in kinds.custom else "function_call"


def reasoning_item(item_id: str, text: str) -> dict[str, Any]:
    return {"type": "reasoning", "id": item_id,
            "summary": [{"type": "summary_text", "text": text}] if text else []}


def output_items(message: Message, kinds: ToolKinds | None = None,
                 logprobs: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The output items of an assistant reply, in Responses order; ``logprobs``: its text's
    (``logprobs_of``), when the upstream gave them."""
    items = []
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if reasoning:
        items.append(reasoning_item(new_id("rs"), str(reasoning)))
    text = message.get("content")
    if isinstance(text, list):
        text = "".join(str(p.get("text", "")) for p in text if isinstance(p, dict))
    if text:
        items.append(text_item(new_id("msg"), str(text), logprobs=logprobs))
    for call in message.get("tool_calls") or []:
        items.append(reply_item(new_id(_PREFIX.get(_kind(call, kinds), "fc")), call, kinds))
    return items


@dataclass
class Shell:
    """What a response object says about its request (the same from created to completed)."""

    id: str
    model: str
    body: dict[str, Any]
    created_at: int = field(default_factory=lambda: int(time.time()))
    kinds: ToolKinds = field(default_factory=ToolKinds)  # what a call goes back as

    def response(self, status: str, output: list[dict[str, Any]],
                 usage: dict[str, Any] | None, finish: str | None = None) -> dict[str, Any]:
        body = self.body
        reason = _INCOMPLETE.get(str(finish)) if finish else None
        incomplete = {"reason": reason} if reason else None
        return {
            "id": self.id, "object": "response", "created_at": self.created_at,
            "status": "incomplete" if incomplete and status == "completed" else status,
            "error": None, "incomplete_details": incomplete,
            "instructions": body.get("instructions"), "model": self.model,
            "output": output, "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "previous_response_id": body.get("previous_response_id"),
            "temperature": body.get("temperature"), "top_p": body.get("top_p"),
            "tool_choice": body.get("tool_choice", "auto"), "tools": body.get("tools") or [],
            "max_output_tokens": body.get("max_output_tokens"),
            "metadata": body.get("metadata") or {}, "store": body.get("store", True),
            "text": body.get("text") or {"format": {"type": "text"}},
            "reasoning": body.get("reasoning") or {"effort": None, "summary": None},
            "truncation": body.get("truncation") or "disabled", "usage": usage,
        }


_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}
"""A chat finish_reason that leaves a response "incomplete", and the reason it gives."""


def reply_of(data: dict[str, Any]) -> tuple[Message, str | None, list[dict[str, Any]]]:
    """A chat completion's message, finish reason and text logprobs (``logprobs_of``)."""
    choice = (data.get("choices") or [{}])[0]
    message = choice.get("message") if isinstance(choice, dict) else None
    return (message if isinstance(message, dict) else {"role": "assistant", "content": None},
            choice.get("finish_reason") if isinstance(choice, dict) else None,
            logprobs_of(choice))


# -- streams -----------------------------------------------------------------------------------

class ResponseEvents:
    """Feed ``chat.completion.chunk`` objects; get Responses SSE events back. ``message()``
    is the reply assembled so far (what ``response.completed`` reports).

    A text or reasoning item is done when the next item begins; a function call is done
    only when the stream is (parallel calls may stream their arguments interleaved), so its
    ``done`` events carry its whole arguments. The items still open when the stream ends are
    done with ``response.completed``; after a failure they are not (``response.failed``)."""

    def __init__(self, shell: Shell) -> None:
        self.shell = shell
        self.sequence = 0
        self.started = False
        self.items: list[dict[str, Any]] = []  # output items, in order
        self.open: dict[str, Any] | None = None  # the text or reasoning item being streamed
        self.calls: dict[int, dict[str, Any]] = {}  # chat tool-call key -> its item
        self.parts: dict[int, CallParts] = {}  # chat tool-call key -> the call so far
        self.last_call: int | None = None
        self.open_calls: list[dict[str, Any]] = []  # call items not done yet
        self.inputs: dict[str, InputDeltas] = {}  # a custom or tool_search call's arguments
        self.usage: dict[str, Any] | None = None
        self.finish: str | None = None

    def event(self, kind: str, **fields: Any) -> bytes:
        data = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return f"event: {kind}\ndata: ".encode() + json.dumps(data, ensure_ascii=False).encode() \
            + b"\n\n"

    def _start(self) -> Iterator[bytes]:
        self.started = True
        shell = self.shell.response("in_progress", [], None)
        yield self.event("response.created", response=shell)
        yield self.event("response.in_progress", response=shell)

    def chunk(self, chunk: dict[str, Any]) -> bytes:
        return b"".join(self._feed(chunk))

    def _feed(self, chunk: dict[str, Any]) -> Iterator[bytes]:
        if not self.started:
            yield from self._start()
        if isinstance(chunk.get("usage"), dict):
            self.usage = usage_of(chunk["usage"])
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                yield from self._reasoning(reasoning)
            if isinstance(delta.get("content"), str) and delta["content"]:
                yield from self._text(delta["content"], logprobs_of(choice))
            for position, call in enumerate(delta.get("tool_calls") or []):
                yield from self._call(call, position)
            if choice.get("finish_reason"):
                self.finish = str(choice["finish_reason"])

    def _add(self, item: dict[str, Any]) -> Iterator[bytes]:
        yield from self._close()
        if item["type"] in _CALL_ITEMS:
            self.open_calls.append(item)
        else:
            self.open = item
        self.items.append(item)
        yield self.event("response.output_item.added", output_index=len(self.items) - 1,
                         item=dict(item, status="in_progress") if "status" in item else item)

    def _reasoning(self, text: str) -> Iterator[bytes]:
        if self.open is None or self.open["type"] != "reasoning":
            yield from self._add({"type": "reasoning", "id": new_id("rs"), "summary": []})
            self.open["summary"].append({"type": "summary_text", "text": ""})  # type: ignore[index]
        item = self.open
        assert item is not None
        item["summary"][0]["text"] += text
        yield self.event("response.reasoning_summary_text.delta", item_id=item["id"],
                         output_index=self.items.index(item), summary_index=0, delta=text)

    def _text(self, text: str, logprobs: list[dict[str, Any]]) -> Iterator[bytes]:
        if self.open is None or self.open["type"] != "message":
            item = text_item(new_id("msg"), "")
            item["content"] = []
            yield from self._add(item)
            part = {"type": "output_text", "text": "", "annotations": []}
            item["content"].append(part)
            yield self.event("response.content_part.added", item_id=item["id"],
                             output_index=len(self.items) - 1, content_index=0, part=part)
        current = self.open
        assert current is not None
        current["content"][0]["text"] += text
        if logprobs:
            current["content"][0].setdefault("logprobs", []).extend(logprobs)
        yield self.event("response.output_text.delta", item_id=current["id"],
                         output_index=self.items.index(current), content_index=0, delta=text,
                         logprobs=logprobs)

    def _call(self, call: Any, position: int) -> Iterator[bytes]:
        if not isinstance(call, dict):
            return
        key = self.last_call = add_call(self.parts, self.last_call, call, position)
        if key is None:
            return
        parts = self.parts[key]
        item = self.calls.get(key)
        if item is None:
            start = {"id": parts.id or None, "function": {"name": parts.name or None,
                                                          "arguments": ""}}
            kind = _kind(start, self.shell.kinds)
            item = reply_item(new_id(_PREFIX.get(kind, "fc")), start, self.shell.kinds)
            if kind != "function_call":
                self.inputs[item["id"]] = InputDeltas()
            self.calls[key] = item
            yield from self._add(item)
        elif item not in self.open_calls:
            return  # more of a call already done (nothing to add it to)
        else:  # an id or a name that came after the call's first fragment
            item["call_id"] = parts.id or item["call_id"]
            if "name" in item:
                item["name"] = parts.name or item["name"]
        fn = call.get("function")
        fragment = fn.get("arguments") if isinstance(fn, dict) else None
        if not fragment:
            return
        deltas = self.inputs.get(item["id"])
        if deltas is None:
            item["arguments"] += str(fragment)
            yield self.event("response.function_call_arguments.delta", item_id=item["id"],
                             output_index=self.items.index(item), delta=str(fragment))
            return
        piece = deltas.feed(str(fragment))
        if piece and item["type"] == "custom_tool_call":
            item["input"] += piece
            yield self.event("response.custom_tool_call_input.delta", item_id=item["id"],
                             output_index=self.items.index(item), delta=piece)

    def _close(self) -> Iterator[bytes]:
        """The open text or reasoning item is done."""
        item, self.open = self.open, None
        if item is not None:
            yield from self._done_events(item)

    def _done_events(self, item: dict[str, Any]) -> Iterator[bytes]:
        index = self.items.index(item)
        if item["type"] == "message":
            part = item["content"][0]
            yield self.event("response.output_text.done", item_id=item["id"],
                             output_index=index, content_index=0, text=part["text"],
                             logprobs=part.get("logprobs", []))
            yield self.event("response.content_part.done", item_id=item["id"],
                             output_index=index, content_index=0, part=part)
        elif item["type"] == "function_call":
            yield self.event("response.function_call_arguments.done", item_id=item["id"],
                             output_index=index, arguments=item["arguments"])
        elif item["type"] == "custom_tool_call":
            given = self.inputs[item["id"]].given
            self._settle(item)
            whole = item["input"]
            if len(whole) > len(given) and whole.startswith(given):
                yield self.event("response.custom_tool_call_input.delta", item_id=item["id"],
                                 output_index=index, delta=whole[len(given):])
            yield self.event("response.custom_tool_call_input.done", item_id=item["id"],
                             output_index=index, input=whole)
        elif item["type"] == "reasoning" and item["summary"]:
            yield self.event("response.reasoning_summary_text.done", item_id=item["id"],
                             output_index=index, summary_index=0,
                             text=item["summary"][0]["text"])
        yield self.event("response.output_item.done", output_index=index, item=item)

    def _close_all(self) -> Iterator[bytes]:
        """The stream is over: every item still open is done, in output order."""
        yield from self._close()
        calls, self.open_calls = self.open_calls, []
        for item in calls:
            yield from self._done_events(item)

    def _settle(self, item: dict[str, Any]) -> None:
        """A custom or tool_search call's whole input or arguments, from the chat call's."""
        deltas = self.inputs.get(item["id"])
        if deltas is not None and item["type"] == "custom_tool_call":
            item["input"] = custom_input(deltas.raw)
        elif deltas is not None:
            item["arguments"] = search_arguments(deltas.raw)

    def completed(self) -> dict[str, Any]:
        """The final response object."""
        for item in self.open_calls:
            self._settle(item)
        return self.shell.response("completed", self.items, self.usage, self.finish)

    def close_items(self) -> bytes:
        """The pipeline's stream ended (its [DONE], or an error): only the response's opening
        if nothing came. The open items are done by ``done()``, which follows once the reply
        is stored; after ``error()`` they stay unfinished."""
        if not self.started:
            return b"".join(self._start())
        return b""

    def done(self) -> bytes:
        return b"".join(self._close_all()) + self.event("response.completed",
                                                        response=self.completed())

    def error(self, status: int, body: dict[str, Any]) -> bytes:
        """The turn failed (the upstream, mid-stream, or storing the reply): the response
        failed, the items still open left unfinished ("incomplete" in its output)."""
        found = body.get("error")
        detail: dict[str, Any] = found if isinstance(found, dict) else {}
        code = detail.get("code")
        if status == 429:
            code = "rate_limit_exceeded"
        elif not isinstance(code, str) or not code:
            code = "server_error"
        unfinished = [self.open, *self.open_calls]
        output = [dict(item, status="incomplete")
                  if "status" in item and any(item is u for u in unfinished) else item
                  for item in self.items]
        response = self.shell.response("failed", output, self.usage)
        response["error"] = {"code": code, "message": str(detail.get("message") or
                                                          f"HTTP {status}")}
        start = b"" if self.started else b"".join(self._start())
        return start + self.event("response.failed", response=response)
