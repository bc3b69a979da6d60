"""A minimal OpenAI-compatible chat client: the ``ChatClient`` seam and its httpx implementation.

``HttpChatClient.complete`` posts one non-streaming ``/chat/completions`` request and returns a
``ChatResult``; every failure leaves as an ``UpstreamError`` classified by ``refold.llm.failures``
(never a raw httpx exception). The transport is injectable (``httpx.MockTransport`` etc.), and
tests run it against ``refold.testing.serve`` over a real socket.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any, Protocol, cast, runtime_checkable

import httpx

from refold._records import dataclass, field
from refold.errors import InvalidInput, UpstreamError
from refold.llm.failures import (
    bad_response,
    classify_transport_error,
    response_error,
)
from refold.messages.model import Message, wire_form
from refold.messages.validate import repair_json_value

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 120.0


@dataclass(frozen=True)
class ChatResult:
    """One completion: the assistant ``message`` (wire dict), why it stopped, and token usage."""

    message: Message
    finish_reason: str | None
    usage: dict[str, int] = field(default_factory=dict)
    model: str | None = None

    @property
    def prompt_tokens(self) -> int | None:
        value = self.usage.get("prompt_tokens")
        return int(value) if isinstance(value, int) else None


@runtime_checkable
class ChatClient(Protocol):
    """Anything that can answer a chat-completions request."""

    def complete(self, messages: Sequence[Message], *, model: str,
                 tools: Sequence[dict[str, Any]] | None = None, max_tokens: int | None = None,
                 timeout: float | None = None) -> ChatResult: ...


def _auth_headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


class HttpChatClient:
    """``ChatClient`` over httpx against any OpenAI-compatible ``base_url`` (…/v1)."""

    def __init__(self, base_url: str, api_key: str | None = None, *,
                 timeout: float = DEFAULT_TIMEOUT,
                 transport: httpx.BaseTransport | None = None,
                 extra_headers: dict[str, str] | None = None) -> None:
        if not base_url or "://" not in base_url:
            raise InvalidInput(f"not an http(s) base URL: {base_url!r}",
                               hint="use e.g. http://127.0.0.1:8000/v1")
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        headers = {**_auth_headers(api_key), **(extra_headers or {})}
        self._http = httpx.Client(transport=transport, headers=headers, timeout=timeout)

    def complete(self, messages: Sequence[Message], *, model: str,
                 tools: Sequence[dict[str, Any]] | None = None, max_tokens: int | None = None,
                 timeout: float | None = None, extra: dict[str, Any] | None = None) -> ChatResult:
        body: dict[str, Any] = {"model": model, "messages": [wire_form(m) for m in messages]}
        if tools:
            body["tools"] = list(tools)
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        body.update(extra or {})
        url = f"{self.base_url}/chat/completions"
        try:
            response = self._http.post(url, json=body, timeout=timeout or self.timeout)
        except httpx.HTTPError as exc:
            raise classify_transport_error(exc, self.base_url) from exc
        if response.status_code >= 400:
            raise response_error(response.status_code, response.text, response.headers)
        return parse_completion(response.text, response.status_code)

    @property
    def http(self) -> httpx.Client:
        """The pooled httpx client (``refold.llm.stream`` streams over it)."""
        return self._http

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> HttpChatClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def json_object(text: str, status: int = 200) -> dict[str, Any]:
    """An upstream body as a JSON object; anything else raises ``UpstreamError(bad_response)``."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise bad_response("body is not JSON", status) from exc
    if not isinstance(data, dict):
        raise bad_response("body is not a JSON object", status)
    # a lone surrogate escaped in a reply (a model that cut an emoji's pair): U+FFFD, as a
    # client's own text gets; stored, counted and sent on as UTF-8 it broke the turn
    return cast(dict[str, Any], repair_json_value(data, text))


def parse_completion(text: str, status: int = 200) -> ChatResult:
    """Parse a chat.completion body; anything unusable raises ``UpstreamError(bad_response)``."""
    data = json_object(text, status)
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise bad_response("no choices", status)
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise bad_response("choice has no message", status)
    if not message.get("content") and not message.get("tool_calls"):
        raise bad_response("empty message", status)
    message = {k: v for k, v in message.items() if v is not None or k == "content"}
    message.setdefault("role", "assistant")
    raw_usage = data.get("usage")
    usage: dict[str, Any] = raw_usage if isinstance(raw_usage, dict) else {}
    clean_usage = {k: int(v) for k, v in usage.items() if isinstance(v, int | float)}
    return ChatResult(message=message, finish_reason=choices[0].get("finish_reason"),
                      usage=clean_usage, model=data.get("model"))


__all__ = ["ChatClient", "ChatResult", "HttpChatClient", "UpstreamError", "json_object",
           "parse_completion"]
