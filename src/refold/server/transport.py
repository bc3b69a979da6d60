"""The proxy's one interface to the upstream's HTTP: ``Transport`` and the ``Reply`` it returns.

``Upstream`` speaks to the model API only through a ``Transport``; two implement it:

- ``H1Transport``: ``server.h1``'s lean keep-alive HTTP/1.1 client (asyncio protocols and
  httptools' C parser) — the default, because the proxy's added latency is what every turn
  pays (``bench/bench_proxy.py`` measures both in the same run: ``--transport``);
- ``HttpxTransport``: ``httpx.AsyncClient`` — where a proxy from the environment applies to the
  upstream (HTTP(S)_PROXY, NO_PROXY), httptools is missing, or an httpx transport is injected
  (tests and benches pass ``httpx.MockTransport`` / ``ASGITransport``).

Both turn every transport failure into the one ``UpstreamError`` taxonomy of ``refold.llm``
(``timeout`` / ``network``) and never send a request twice (a completion is billed). A
``Reply`` is a response whose status line and headers arrived; its body is read once, as a
whole (``read``) or as it comes (``chunks``), and ``aclose`` returns the connection to the pool
when the body was read to the end (else closes it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Protocol

import httpx

from refold.errors import UpstreamError
from refold.llm import classify_transport_error
from refold.llm.failures import transport_failure
from refold.server.h1 import H1Client, H1Error, H1Response, lean_client_for

OnSent = Callable[[], None] | None
# the transport preferred where both apply ("h1" or "httpx"); a process-wide default so a bench
# can run the same serve with httpx (``bench/bench_proxy.py --variants``)
DEFAULT_TRANSPORT = "h1"


class Reply(Protocol):
    """An upstream response whose headers arrived."""

    @property
    def status_code(self) -> int: ...
    @property
    def headers(self) -> Mapping[str, str]: ...  # names in lower case
    def chunks(self) -> AsyncIterator[bytes]: ...  # UpstreamError if the body breaks off
    async def read(self) -> bytes: ...
    async def aclose(self) -> None: ...


class Transport(Protocol):
    """Requests to one upstream base URL (paths are relative to it, e.g. ``/models``)."""

    name: str  # "h1" or "httpx" (for logs and benches)

    async def request(self, method: str, path: str, headers: dict[str, str],
                      body: bytes = b"", on_sent: OnSent = None) -> Reply:
        """Send one request; return once the response headers arrived. ``on_sent()`` (must
        not raise) runs once the request is on its way — work that may overlap the
        upstream's — and not at all when no connection could be had."""
        ...

    async def aclose(self) -> None: ...


class _Reply:
    """A ``Reply`` over a client's response object: status and headers copied once; each
    subclass's ``chunks()`` turns its client's own failures into ``UpstreamError``."""

    def __init__(self, response: H1Response | httpx.Response, base_url: str) -> None:
        self._response = response
        self._base_url = base_url
        self.status_code = response.status_code
        self.headers: Mapping[str, str] = response.headers

    def chunks(self) -> AsyncIterator[bytes]:
        raise NotImplementedError

    async def read(self) -> bytes:
        return b"".join([piece async for piece in self.chunks()])

    async def aclose(self) -> None:
        await self._response.aclose()


class _H1Reply(_Reply):
    _response: H1Response

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            async for data in self._response.chunks():
                yield data
        except H1Error as exc:
            raise transport_failure(exc.kind, str(exc), self._base_url) from exc


class H1Transport:
    """``Transport`` over ``server.h1.H1Client``."""

    name = "h1"

    def __init__(self, client: H1Client, base_url: str) -> None:
        self._client = client
        self._base_url = base_url

    async def request(self, method: str, path: str, headers: dict[str, str],
                      body: bytes = b"", on_sent: OnSent = None) -> Reply:
        try:
            response = await self._client.request(method, path, headers, body, on_sent)
        except H1Error as exc:
            raise transport_failure(exc.kind, str(exc), self._base_url) from exc
        return _H1Reply(response, self._base_url)

    async def aclose(self) -> None:
        await self._client.aclose()

    @property
    def idle_connections(self) -> int:
        return len(self._client._idle)


class _HttpxReply(_Reply):
    _response: httpx.Response

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            async for data in self._response.aiter_bytes():
                yield data
        except httpx.HTTPError as exc:
            raise classify_transport_error(exc, self._base_url) from exc


class HttpxTransport:
    """``Transport`` over an ``httpx.AsyncClient`` (proxies from the environment apply)."""

    name = "httpx"

    def __init__(self, base_url: str, *, timeout: httpx.Timeout, limits: httpx.Limits,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._base_url = base_url
        self.client = httpx.AsyncClient(transport=transport, timeout=timeout, limits=limits)

    async def request(self, method: str, path: str, headers: dict[str, str],
                      body: bytes = b"", on_sent: OnSent = None) -> Reply:
        request = self.client.build_request(method, self._base_url + path,
                                            content=body or None, headers=headers)
        if on_sent is not None:
            on_sent()  # httpx gives no hook once the bytes are out: just before sending
        try:
            response = await self.client.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise classify_transport_error(exc, self._base_url) from exc
        return _HttpxReply(response, self._base_url)

    async def aclose(self) -> None:
        await self.client.aclose()


def transport_for(base_url: str, *, read_timeout: float, connect_timeout: float,
                  transport: httpx.AsyncBaseTransport | None = None,
                  prefer: str | None = None) -> Transport:
    """The transport for ``base_url``: the lean client where it applies (and ``prefer`` is
    "h1"), else httpx (an injected ``transport`` always means httpx)."""
    if transport is None and (prefer or DEFAULT_TRANSPORT) == "h1":
        lean = lean_client_for(base_url, connect_timeout=connect_timeout,
                               read_timeout=read_timeout)
        if lean is not None:
            return H1Transport(lean, base_url)
    # many concurrent streams share one pool; keep-alive makes the added latency small
    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=200)
    return HttpxTransport(base_url, timeout=httpx.Timeout(read_timeout, connect=connect_timeout),
                          limits=limits, transport=transport)


__all__ = ["H1Transport", "HttpxTransport", "Reply", "Transport", "UpstreamError",
           "transport_for"]
