"""The proxy's side of the upstream: chat completions and the model list of an OpenAI-compatible API.

Every request goes through one ``server.transport.Transport`` (the lean HTTP/1.1 client, or httpx
where a proxy from the environment applies, httptools is missing, or an httpx transport is
injected). Every failure leaves this module as a ``refold.errors.UpstreamError`` classified by
``refold.llm`` (the one classifier), never as a raw transport exception; an HTTP error keeps the
upstream's rate-limit headers (``Retry-After``, ``x-ratelimit-*``) in ``UpstreamError.headers``
so the proxy can pass them on. The client key is never forwarded upstream when refold holds an
upstream key; in open mode (no client keys, no upstream key) the client's own bearer is passed
through, so refold can sit in front of a hosted API transparently.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import httpx

from refold.errors import UpstreamError
from refold.llm import classify_http_error
from refold.llm.client import json_object
from refold.llm.failures import bad_response
from refold.server.transport import Reply, Transport, transport_for

log = logging.getLogger(__name__)

# upstream response headers a client needs to pace itself; passed through on errors
PASSED_HEADER_PREFIXES = ("x-ratelimit-", "anthropic-ratelimit-")
PASSED_HEADERS = frozenset({"retry-after", "retry-after-ms"})


def passed_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The rate-limit headers of an upstream response (names in lower case)."""
    out: dict[str, str] = {}
    for name, value in headers.items():
        lower = name.lower()
        if lower in PASSED_HEADERS or lower.startswith(PASSED_HEADER_PREFIXES):
            out[lower] = value
    return out


async def _http_error(reply: Reply) -> UpstreamError:
    """The classified error of a non-2xx reply (body read, connection released)."""
    try:
        text = (await reply.read()).decode("utf-8", "replace")
    except UpstreamError:
        text = ""
    finally:
        await reply.aclose()
    error = classify_http_error(reply.status_code, text)
    error.headers = passed_headers(reply.headers)
    return error


class UpstreamStream:
    """A streamed completion whose 2xx SSE headers arrived: iterate ``chunks()`` (raw body bytes
    as they come; an ``UpstreamError`` if the stream breaks off), then ``aclose()``."""

    def __init__(self, reply: Reply) -> None:
        self._reply = reply

    def chunks(self) -> AsyncIterator[bytes]:
        return self._reply.chunks()

    async def aclose(self) -> None:
        await self._reply.aclose()


class Upstream:
    """Talks to ``base_url`` (…/v1): chat completions (JSON or streamed) and the model list."""

    def __init__(self, base_url: str, api_key: str | None = None, *,
                 transport: httpx.AsyncBaseTransport | None = None,
                 read_timeout: float = 600.0, connect_timeout: float = 10.0,
                 prefer: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.transport: Transport = transport_for(
            self.base_url, read_timeout=read_timeout, connect_timeout=connect_timeout,
            transport=transport, prefer=prefer)

    @property
    def lean(self) -> bool:
        """True when requests use the lean client (``server.h1``), not httpx."""
        return self.transport.name == "h1"

    def _headers(self, bearer: str | None, json_body: bool = False) -> dict[str, str]:
        key = self.api_key or bearer
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        if json_body:
            headers["Content-Type"] = "application/json"
        return headers

    async def _json(self, method: str, path: str, bearer: str | None, body: bytes,
                    on_sent: Callable[[], None] | None = None) -> dict[str, Any]:
        reply = await self.transport.request(method, path, self._headers(bearer, bool(body)),
                                             body, on_sent)
        if reply.status_code >= 400:
            raise await _http_error(reply)
        try:
            text = (await reply.read()).decode("utf-8", "replace")
        finally:
            await reply.aclose()
        return json_object(text, reply.status_code)

    async def models(self, bearer: str | None) -> dict[str, Any]:
        return await self._json("GET", "/models", bearer, b"")

    async def complete(self, body: bytes, bearer: str | None,
                       on_sent: Callable[[], None] | None = None) -> dict[str, Any]:
        """A non-streaming completion: the upstream's JSON object (status 2xx). ``on_sent()``
        (must not raise) runs once the request is on its way (``Transport.request``)."""
        return await self._json("POST", "/chat/completions", bearer, body, on_sent)

    async def open_stream(self, body: bytes, bearer: str | None,
                          on_sent: Callable[[], None] | None = None) -> UpstreamStream:
        """Start a streamed completion; the caller iterates ``chunks()`` and closes it.
        ``on_sent`` as for ``complete``."""
        reply = await self.transport.request("POST", "/chat/completions",
                                             self._headers(bearer, True), body, on_sent)
        if reply.status_code >= 400:
            raise await _http_error(reply)
        ctype = reply.headers.get("content-type", "")
        if "text/event-stream" not in ctype:
            await reply.aclose()
            raise bad_response(f"asked for a stream, got {ctype or 'no content type'}",
                               reply.status_code)
        return UpstreamStream(reply)

    async def aclose(self) -> None:
        await self.transport.aclose()


__all__ = ["Upstream", "UpstreamError", "UpstreamStream", "passed_headers"]
