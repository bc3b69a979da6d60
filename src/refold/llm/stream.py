"""A streamed chat completion for interactive surfaces (``refold chat``): text as it arrives.

``stream_completion(client, messages, model=…, on_text=…)`` posts ``stream: true`` with
``include_usage``, calls ``on_text(delta)`` for each content delta, and returns the same
``ChatResult`` ``HttpChatClient.complete`` would (content, reasoning, tool calls folded by
index, finish reason, usage). A stream that ends before a finish reason, or an error inside
the stream, raises ``UpstreamError`` — the caller records nothing partial.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import httpx

from refold.llm.client import ChatResult, HttpChatClient
from refold.llm.failures import bad_response, classify_http_error, classify_transport_error
from refold.messages.model import Message, wire_form

TextSink = Callable[[str], None]


def _events(lines: Iterator[str]) -> Iterator[str]:
    """The ``data:`` payloads of an SSE body, one per event."""
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield "\n".join(data)
                data = []
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
    if data:
        yield "\n".join(data)


class _Folded:
    def __init__(self) -> None:
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish: str | None = None
        self.usage: dict[str, int] = {}
        self.model: str | None = None

    def add(self, chunk: dict[str, Any], on_text: TextSink) -> None:
        if "error" in chunk and "choices" not in chunk:
            detail = chunk.get("error") or {}
            status = int(detail.get("status") or 502) if isinstance(detail, dict) else 502
            raise classify_http_error(status, json.dumps(chunk))
        if isinstance(chunk.get("usage"), dict):
            self.usage = {k: int(v) for k, v in chunk["usage"].items()
                          if isinstance(v, int | float)}
        self.model = chunk.get("model") or self.model
        for choice in chunk.get("choices") or []:
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                self._choice(choice, on_text)

    def _choice(self, choice: dict[str, Any], on_text: TextSink) -> None:
        delta = choice.get("delta") or {}
        if isinstance(delta.get("content"), str) and delta["content"]:
            self.text.append(delta["content"])
            on_text(delta["content"])
        for key in ("reasoning_content", "reasoning"):
            if isinstance(delta.get(key), str):
                self.reasoning.append(delta[key])
        for position, call in enumerate(delta.get("tool_calls") or []):
            parts = self.calls.setdefault(int(call.get("index", position)), {
                "id": "", "type": "function", "function": {"name": "", "arguments": ""}})
            parts["id"] = call.get("id") or parts["id"]
            fn = call.get("function") or {}
            parts["function"]["name"] += fn.get("name") or ""
            parts["function"]["arguments"] += fn.get("arguments") or ""
        if choice.get("finish_reason"):
            self.finish = str(choice["finish_reason"])

    def result(self) -> ChatResult:
        message: Message = {"role": "assistant", "content": "".join(self.text) or None}
        if self.calls:
            message["tool_calls"] = [c for _, c in sorted(self.calls.items())]
        if self.reasoning:
            message["reasoning_content"] = "".join(self.reasoning)
        return ChatResult(message=message, finish_reason=self.finish, usage=self.usage,
                          model=self.model)


def stream_completion(client: HttpChatClient, messages: Sequence[Message], *, model: str,
                      on_text: TextSink, tools: Sequence[dict[str, Any]] | None = None,
                      timeout: float | None = None) -> ChatResult:
    body: dict[str, Any] = {"model": model, "messages": [wire_form(m) for m in messages],
                            "stream": True, "stream_options": {"include_usage": True}}
    if tools:
        body["tools"] = list(tools)
    folded = _Folded()
    try:
        with client.http.stream("POST", f"{client.base_url}/chat/completions", json=body,
                                timeout=timeout or client.timeout) as response:
            if response.status_code >= 400:
                response.read()
                raise classify_http_error(response.status_code, response.text)
            for data in _events(response.iter_lines()):
                if data.strip() == "[DONE]":
                    break
                try:
                    chunk = json.loads(data)
                except ValueError:
                    continue
                if isinstance(chunk, dict):
                    folded.add(chunk, on_text)
    except httpx.HTTPError as exc:
        raise classify_transport_error(exc, client.base_url) from exc
    if folded.finish is None:
        raise bad_response("the stream ended before a finish_reason")
    return folded.result()
