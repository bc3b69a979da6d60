"""A streamed chat completion for interactive surfaces (``refold chat``): text as it arrives.

``stream_completion(client, messages, model=…, on_text=…)`` posts ``stream: true`` with
``include_usage``, calls ``on_text(delta)`` for each content delta, and returns the same
``ChatResult`` ``HttpChatClient.complete`` would (content, reasoning, tool calls folded by
index, finish reason, usage). A stream that ends before a finish reason, or an error inside
the stream, raises ``UpstreamError`` — the caller records nothing partial.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import httpx

from refold.llm.client import ChatResult, HttpChatClient
from refold.llm.failures import (
    bad_response,
    classify_http_error,
    classify_transport_error,
    response_error,
)
from refold.llm.sse import DONE, Event, EventSplitter, StreamAssembler, parse_chunk
from refold.messages.model import Message, wire_form

TextSink = Callable[[str], None]


def _check_error(chunk: dict[str, Any]) -> None:
    """An error the upstream sent inside the stream (a chunk with ``error`` and no choices)."""
    if "error" in chunk and "choices" not in chunk:
        detail = chunk.get("error") or {}
        status = int(detail.get("status") or 502) if isinstance(detail, dict) else 502
        raise classify_http_error(status, json.dumps(chunk))


def _result(folded: StreamAssembler) -> ChatResult:
    usage = {k: int(v) for k, v in (folded.usage or {}).items() if isinstance(v, int | float)}
    message = folded.message()
    message.pop("thinking_blocks", None)  # (LiteLLM's key; the chat client never sends it)
    return ChatResult(message=message, finish_reason=folded.finish_reason, usage=usage,
                      model=folded.model)


def stream_completion(client: HttpChatClient, messages: Sequence[Message], *, model: str,
                      on_text: TextSink, tools: Sequence[dict[str, Any]] | None = None,
                      timeout: float | None = None) -> ChatResult:
    body: dict[str, Any] = {"model": model, "messages": [wire_form(m) for m in messages],
                            "stream": True, "stream_options": {"include_usage": True}}
    if tools:
        body["tools"] = list(tools)
    folded = StreamAssembler()
    splitter = EventSplitter()
    try:
        with client.http.stream("POST", f"{client.base_url}/chat/completions", json=body,
                                timeout=timeout or client.timeout) as response:
            if response.status_code >= 400:
                response.read()
                raise response_error(response.status_code, response.text, response.headers)
            for data in response.iter_bytes():
                if _fold(splitter.feed(data), folded, on_text):
                    break
            else:
                _fold(splitter.feed(b"\n\n"), folded, on_text)  # a last event without its blank line
    except httpx.HTTPError as exc:
        raise classify_transport_error(exc, client.base_url) from exc
    if not folded.complete:
        raise bad_response("the stream ended before a finish_reason")
    return _result(folded)


def _fold(events: list[Event], folded: StreamAssembler, on_text: TextSink) -> bool:
    """Fold ``events`` in; True at ``[DONE]``."""
    for event in events:
        if event.data is None:
            continue
        if event.data.strip() == DONE:
            return True
        chunk = parse_chunk(event.data)
        if chunk is None:
            continue
        _check_error(chunk)
        before = len(folded.content)
        folded.add(chunk)
        for text in folded.content[before:]:
            if text:
                on_text(text)
    return False
