"""The proxy's side of the upstream: one pooled ``httpx.AsyncClient`` to an OpenAI-compatible API.

Every failure leaves this module as a ``refold.errors.UpstreamError`` classified by
``refold.llm`` (the one classifier), never as a raw httpx exception. The transport is injectable
(tests and benches may pass ``httpx.ASGITransport`` or ``MockTransport``). The client key is never
forwarded upstream when refold holds an upstream key; in open mode (no client keys, no upstream
key) the client's own bearer is passed through, so refold can sit in front of a hosted API
transparently.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx

from refold.errors import UpstreamError
from refold.llm import classify_http_error, classify_transport_error
from refold.llm.client import json_object
from refold.llm.failures import bad_response
from refold.server.transport import upstream_transport

log = logging.getLogger(__name__)


class Upstream:
    """Talks to ``base_url`` (…/v1): chat completions (JSON or streamed) and the model list."""

    def __init__(self, base_url: str, api_key: str | None = None, *,
                 transport: httpx.AsyncBaseTransport | None = None,
                 read_timeout: float = 600.0, connect_timeout: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        timeout = httpx.Timeout(read_timeout, connect=connect_timeout)
        # many concurrent streams share one pool; keep-alive makes the added latency small
        limits = httpx.Limits(max_connections=1000, max_keepalive_connections=200)
        # httpx's own transport with cheap idle checks (see server.transport), mounted rather
        # than passed as ``transport=`` so proxies from the environment still apply
        mounts = None if transport is not None else {"all://": upstream_transport(limits)}
        self._http = httpx.AsyncClient(transport=transport, mounts=mounts, timeout=timeout,
                                       limits=limits)

    def _headers(self, bearer: str | None, json_body: bool = False) -> dict[str, str]:
        key = self.api_key or bearer
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        if json_body:
            headers["Content-Type"] = "application/json"
        return headers

    async def models(self, bearer: str | None) -> dict[str, Any]:
        response = await self._send("GET", "/models", bearer, None)
        return json_object(response.text, response.status_code)

    async def complete(self, body: bytes, bearer: str | None) -> dict[str, Any]:
        """A non-streaming completion: the upstream's JSON object (status 2xx)."""
        response = await self._send("POST", "/chat/completions", bearer, body)
        return json_object(response.text, response.status_code)

    async def open_stream(self, body: bytes, bearer: str | None) -> httpx.Response:
        """Start a streamed completion; the caller iterates ``aiter_raw()`` and closes it."""
        request = self._http.build_request("POST", self.base_url + "/chat/completions",
                                           content=body, headers=self._headers(bearer, True))
        try:
            response = await self._http.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise classify_transport_error(exc, self.base_url) from exc
        if response.status_code >= 400:
            text = await _read_and_close(response)
            raise classify_http_error(response.status_code, text)
        ctype = response.headers.get("content-type", "")
        if "text/event-stream" not in ctype:
            await _read_and_close(response)
            raise bad_response(f"asked for a stream, got {ctype or 'no content type'}",
                               response.status_code)
        return response

    async def _send(self, method: str, path: str, bearer: str | None,
                    body: bytes | None) -> httpx.Response:
        try:
            response = await self._http.request(method, self.base_url + path, content=body,
                                                headers=self._headers(bearer, body is not None))
        except httpx.HTTPError as exc:
            raise classify_transport_error(exc, self.base_url) from exc
        if response.status_code >= 400:
            raise classify_http_error(response.status_code, response.text)
        return response

    async def aclose(self) -> None:
        await self._http.aclose()


async def _read_and_close(response: httpx.Response) -> str:
    try:
        await response.aread()
        return response.text
    except httpx.HTTPError:
        return ""
    finally:
        await response.aclose()


__all__ = ["Upstream", "UpstreamError"]
