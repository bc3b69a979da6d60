"""The proxy's side of the upstream: chat completions and the model list of an OpenAI-compatible API.

Chat completions (the hot path) go through ``server.h1``'s lean keep-alive client when it
applies; httpx carries them when a proxy from the environment applies to the upstream, when
httptools is missing, or when a transport is injected (tests and benches may pass
``httpx.ASGITransport`` or ``MockTransport``). ``/models`` always uses the pooled
``httpx.AsyncClient``. Either way every failure leaves this module as a
``refold.errors.UpstreamError`` classified by ``refold.llm`` (the one classifier), never as a
raw transport exception. The client key is never
forwarded upstream when refold holds an upstream key; in open mode (no client keys, no upstream
key) the client's own bearer is passed through, so refold can sit in front of a hosted API
transparently.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx

from refold.errors import UpstreamError
from refold.llm import classify_http_error, classify_transport_error
from refold.llm.client import json_object
from refold.llm.failures import bad_response, transport_failure
from refold.server.h1 import H1Client, H1Error, H1Response, lean_client_for
from refold.server.transport import upstream_transport

log = logging.getLogger(__name__)


class UpstreamStream:
    """A streamed completion whose 2xx SSE headers arrived: iterate ``chunks()`` (raw body bytes
    as they come; an ``UpstreamError`` if the stream breaks off), then ``aclose()``."""

    def __init__(self, response: H1Response | httpx.Response, base_url: str) -> None:
        self._response = response
        self._base_url = base_url

    async def chunks(self) -> AsyncIterator[bytes]:
        response = self._response
        try:
            if isinstance(response, H1Response):
                async for data in response.chunks():
                    yield data
            else:
                async for data in response.aiter_bytes():
                    yield data
        except H1Error as exc:
            raise transport_failure(exc.kind, str(exc), self._base_url) from exc
        except httpx.HTTPError as exc:
            raise classify_transport_error(exc, self._base_url) from exc

    async def aclose(self) -> None:
        await self._response.aclose()


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
        self._lean: H1Client | None = None if transport is not None else lean_client_for(
            self.base_url, connect_timeout=connect_timeout, read_timeout=read_timeout)

    @property
    def lean(self) -> bool:
        """True when chat completions use the lean client (``server.h1``), not httpx."""
        return self._lean is not None

    def _headers(self, bearer: str | None, json_body: bool = False) -> dict[str, str]:
        key = self.api_key or bearer
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        if json_body:
            headers["Content-Type"] = "application/json"
        return headers

    async def models(self, bearer: str | None) -> dict[str, Any]:
        response = await self._send("GET", "/models", bearer, None)
        return json_object(response.text, response.status_code)

    async def complete(self, body: bytes, bearer: str | None,
                       on_sent: Callable[[], None] | None = None) -> dict[str, Any]:
        """A non-streaming completion: the upstream's JSON object (status 2xx). ``on_sent()``
        (must not raise) runs once the request is on its way: on the lean client as soon as
        it is handed to the socket, through httpx just before it is sent."""
        if self._lean is None:
            if on_sent is not None:
                on_sent()
            response = await self._send("POST", "/chat/completions", bearer, body)
            return json_object(response.text, response.status_code)
        try:
            lean = await self._lean.request("POST", "/chat/completions",
                                            self._headers(bearer, True), body, on_sent)
            text = (await lean.read()).decode("utf-8", "replace")
        except H1Error as exc:
            raise transport_failure(exc.kind, str(exc), self.base_url) from exc
        if lean.status_code >= 400:
            raise classify_http_error(lean.status_code, text)
        return json_object(text, lean.status_code)

    async def open_stream(self, body: bytes, bearer: str | None,
                          on_sent: Callable[[], None] | None = None) -> UpstreamStream:
        """Start a streamed completion; the caller iterates ``chunks()`` and closes it.
        ``on_sent`` as for ``complete``."""
        headers = self._headers(bearer, True)
        if self._lean is None:
            if on_sent is not None:
                on_sent()
            return await self._open_httpx_stream(body, headers)
        try:
            response = await self._lean.request("POST", "/chat/completions", headers, body,
                                                on_sent)
            if response.status_code >= 400:
                text = (await response.read()).decode("utf-8", "replace")
                raise classify_http_error(response.status_code, text)
        except H1Error as exc:
            raise transport_failure(exc.kind, str(exc), self.base_url) from exc
        ctype = response.headers.get("content-type", "")
        if "text/event-stream" not in ctype:
            await response.aclose()
            raise bad_response(f"asked for a stream, got {ctype or 'no content type'}",
                               response.status_code)
        return UpstreamStream(response, self.base_url)

    async def _open_httpx_stream(self, body: bytes, headers: dict[str, str]) -> UpstreamStream:
        request = self._http.build_request("POST", self.base_url + "/chat/completions",
                                           content=body, headers=headers)
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
        return UpstreamStream(response, self.base_url)

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
        if self._lean is not None:
            await self._lean.aclose()


async def _read_and_close(response: httpx.Response) -> str:
    try:
        await response.aread()
        return response.text
    except httpx.HTTPError:
        return ""
    finally:
        await response.aclose()


__all__ = ["Upstream", "UpstreamError", "UpstreamStream"]
