"""``POST /v1/messages`` and ``POST /v1/messages/count_tokens``: Anthropic Messages on refold.

A Messages request is translated to the chat form (``server.anthropic_wire``) and runs through
the same turn pipeline as ``/v1/chat/completions`` (``server.rewrite.chat_turn``): the same
session (``X-Refold-Session``, or derived from the conversation), the same storing of re-sent
history once, compaction, memory and tenancy. The reply — JSON or a stream — is rendered back
as Anthropic's, and every error, whatever raised it, leaves in Anthropic's shape
``{"type": "error", "error": {"type": …, "message": …}}`` (an ``error`` event once a stream
has started).

With ``upstream_format = "anthropic"`` the upstream is an Anthropic endpoint
(``server.anthropic_upstream``): what refold does not change (thinking signatures, server tools,
``cache_control``, ``anthropic-beta``, the upstream's own message and events) passes through.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from refold.errors import InvalidInput
from refold.jsonscan import anthropic_blocks
from refold.server.anthropic_wire import (
    PRIVATE,
    StreamTranslator,
    anthropic_error,
    anthropic_message,
    anthropic_status,
    chat_messages,
    chat_request,
    chat_tools,
)
from refold.server.auth import Tenant
from refold.server.completions import Proxy
from refold.server.rewrite import RewrittenStream, chat_turn, reply_json, rewritten_json
from refold.server.wire import check_sampling, check_sendable
from refold.tokens import get_counter

Handler = Callable[[Request, Tenant], Awaitable[Response]]
BETA_HEADERS = ("anthropic-beta", "anthropic-version")


class Host(Protocol):
    """What the endpoints need of the app (``server.app.ProxyApp``)."""

    settings: Any

    def endpoint(self, handler: Handler) -> Callable[[Request], Awaitable[Response]]: ...
    def running_proxy(self) -> Proxy: ...
    async def body_of(self, request: Request) -> tuple[Any, int]: ...


MESSAGES_PATH = "/v1/messages"


def is_messages_path(path: str) -> bool:
    """Is ``path`` this API's (``/v1/messages`` or below), whose errors are Anthropic's?"""
    return path == MESSAGES_PATH or path.startswith(MESSAGES_PATH + "/")


def anthropic_json(status: int, body: Any, headers: Mapping[str, str] | None = None
                   ) -> JSONResponse:
    """An OpenAI-shaped error ``body`` answered in Anthropic's shape and status."""
    return JSONResponse(anthropic_error(status, body), status_code=anthropic_status(status, body),
                        headers=headers)


def in_anthropic_shape(run: Callable[[Request], Awaitable[Response]]
                       ) -> Callable[[Request], Awaitable[Response]]:
    """Re-render the app's (OpenAI-shaped) error responses — auth, body size, anything the
    endpoint raised — in Anthropic's shape, keeping their headers (an upstream failure's
    ``Retry-After``, ``retry-after-ms`` and ``x-ratelimit-*``, ``wire.error_headers``). An
    exception no endpoint answers reaches the app's error handler, which answers it in
    Anthropic's shape too (``app._shaped``)."""
    async def wrapped(request: Request) -> Response:
        response = await run(request)
        if response.status_code < 400 or not isinstance(response, JSONResponse):
            return response
        body = json.loads(bytes(response.body))
        return rewritten_json(response, anthropic_error(response.status_code, body),
                              anthropic_status(response.status_code, body))
    return wrapped


def routes(host: Host) -> list[Route]:
    async def messages(request: Request, tenant: Tenant) -> Response:
        raw, size = await host.body_of(request)
        return await create_message(host, tenant, request, raw, size)

    async def count_tokens(request: Request, tenant: Tenant) -> Response:
        raw, _ = await host.body_of(request)
        return JSONResponse(count_tokens_of(raw, host.settings.model))

    return [
        Route("/v1/messages", in_anthropic_shape(host.endpoint(messages)), methods=["POST"]),
        Route("/v1/messages/count_tokens", in_anthropic_shape(host.endpoint(count_tokens)),
              methods=["POST"]),
    ]


def _anthropic_upstream(host: Host) -> bool:
    return str(getattr(host.settings, "upstream_format", "openai")) == "anthropic"


async def create_message(host: Host, tenant: Tenant, request: Request, raw: Any,
                         size: int) -> Response:
    """One Messages turn through the chat-completions pipeline."""
    passthrough = _anthropic_upstream(host)
    check_fields(raw)
    body = chat_request(raw, anthropic_upstream=passthrough)
    check_sendable(body["messages"])
    if passthrough:
        body[PRIVATE]["headers"] = {k: request.headers[k] for k in BETA_HEADERS
                                    if k in request.headers}
    response = await chat_turn(host.running_proxy(), tenant, request.headers, body, size,
                               receive=request.receive)
    if body["stream"]:
        return RewrittenStream(response, StreamTranslator(body["model"]))
    return rewritten_json(response, anthropic_message(reply_json(response), body["model"]))


def count_tokens_of(raw: Any, default_model: str) -> dict[str, int]:
    """``{"input_tokens": n}`` for a Messages request, counted as refold counts its window."""
    if not isinstance(raw, dict) or not isinstance(raw.get("messages"), list):
        raise InvalidInput("messages: a list of messages is required")
    _check_text_blocks(raw)
    counter = get_counter(str(raw.get("model") or default_model))
    messages = chat_messages(raw)
    return {"input_tokens": counter.count_messages(messages)
            + counter.count_tools(chat_tools(raw.get("tools")))}


def check_fields(raw: Any) -> None:
    """InvalidInput (a 400, before anything is stored or sent) for the fields Anthropic's API
    refuses and the translation would pass on as they are: a ``stream`` that is not a boolean
    (``"yes"`` or ``1`` started a stream), a ``temperature`` or ``top_p`` that is not a number,
    a ``max_tokens`` that is not a positive integer, a text block without a ``text`` string."""
    if not isinstance(raw, dict):
        return  # (chat_request says what is wrong)
    check_sampling(raw)
    tokens = raw.get("max_tokens")
    if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens < 1:
        raise InvalidInput("max_tokens: must be a positive integer")
    _check_text_blocks(raw)


def _check_text_blocks(raw: Any) -> None:
    """InvalidInput for a ``text`` block (in ``system``, a message, or a ``tool_result``'s
    content) whose ``text`` is missing or not a string."""
    if not isinstance(raw, dict):
        return
    _text_blocks(raw.get("system"), "system")
    messages = raw.get("messages")
    found = anthropic_blocks(messages) if isinstance(messages, list) else None
    if found is not None and not found[1]:
        return  # (looked for in C: none is bad)
    for i, message in enumerate(messages if isinstance(messages, list) else ()):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        # (where a block is named only once one is bad: an agent re-sends hundreds of turns)
        if _bad_text(content) is not None:
            _text_blocks(content, f"messages.{i}.content")
        for j, block in enumerate(content):
            if isinstance(block, dict) and block.get("type") == "tool_result" \
                    and _bad_text(block.get("content")) is not None:
                _text_blocks(block.get("content"), f"messages.{i}.content.{j}.content")


def _bad_text(blocks: Any) -> int | None:
    """The index of the first ``text`` block of ``blocks`` without a ``text`` string."""
    for j, block in enumerate(blocks if isinstance(blocks, list) else ()):
        if isinstance(block, dict) and block.get("type") == "text" \
                and not isinstance(block.get("text"), str):
            return j
    return None


def _text_blocks(blocks: Any, where: str) -> None:
    bad = _bad_text(blocks)
    if bad is not None:
        raise InvalidInput(f"{where}.{bad}.text: a text block needs a 'text' string")


__all__ = ["anthropic_json", "check_fields", "count_tokens_of", "create_message",
           "in_anthropic_shape", "is_messages_path", "routes"]
