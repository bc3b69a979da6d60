"""A lean HTTP/1.1 client for the proxy's hot path: asyncio protocols and httptools' C parser.

Why not httpx here: a proxied turn is one request upstream and a dozen or more streamed events
back. Through httpx → httpcore → h11 each event costs several hundred Python calls (the profile
of one streamed turn counted ~7,000 calls in the proxy's event loop); here it is one
``data_received`` into the C parser and one queue append. The proxy's added latency is what
users pay on every turn (``bench/bench_proxy.py``).

What it does, and only that:
- keep-alive connections per origin, reused one request at a time (no pipelining); a connection
  the server closed while idle is noticed by asyncio itself (``connection_lost``) and never
  reused; a request is never sent twice (the upstream may have acted on it: a completion is
  billed), so a connection lost mid-request is a network failure, as with httpx;
- ``Content-Length``, chunked and close-delimited response bodies; ``Accept-Encoding: identity``
  so bodies arrive as sent;
- a connect timeout, and a read timeout on every wait for response bytes (and on a request
  body the socket stops taking);
- flow control both ways: writes wait while the socket buffer is full, reading pauses while
  more than ``HIGH_WATER`` bytes wait unread;
- TLS through ``ssl`` (certifi's CA bundle, or ``SSL_CERT_FILE`` when set, as httpx does).

Proxies from the environment are not spoken here: ``lean_client_for`` returns None when
HTTP(S)_PROXY applies to the upstream (or httptools is missing), and ``Upstream`` keeps httpx
for that case. Failures leave as ``H1Error`` with kind "timeout" or "network"; ``Upstream``
turns them into the one ``UpstreamError`` taxonomy.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import urllib.request
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import urlsplit

try:
    import httptools
except ImportError:  # pragma: no cover - httptools ships with refold[server]
    httptools = None  # type: ignore[assignment]

HIGH_WATER = 1 << 20  # unread response bytes before the socket stops being read
MAX_IDLE = 256  # idle keep-alive connections kept per client


class H1Error(Exception):
    """A transport failure: no usable HTTP response. ``kind`` is "timeout" or "network"."""

    def __init__(self, message: str, kind: str = "network") -> None:
        super().__init__(message)
        self.kind = kind


class _Connection(asyncio.Protocol):
    """One TCP (or TLS) connection; at most one response in flight."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._reset()
        self._write_ready = loop.create_future()
        self._write_ready.set_result(None)

    def _reset(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.headers: dict[str, str] = {}
        self._name = b""
        self.headers_done = False
        self.keep_alive = False
        self.complete = False
        self._interim = False  # parsing a 1xx response (100 Continue, 103 Early Hints)
        self.received = 0  # response bytes seen, headers included
        self.error: H1Error | None = None
        self.body: deque[bytes] = deque()
        self.buffered = 0
        self._waiter: asyncio.Future[None] | None = None

    # -- asyncio.Protocol ----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.received += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(H1Error("the upstream switched protocols mid-response"))
        except httptools.HttpParserError as exc:
            self._fail(H1Error(f"the upstream sent malformed HTTP: {exc}"))

    def eof_received(self) -> bool:
        return False  # close our side too; connection_lost settles the response

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self._write_ready.done():
            self._write_ready.set_result(None)
        if self.complete or self.error is not None:
            return
        if self.headers_done and self._close_delimited():
            self.complete = True  # the body ran until the server closed: that is its end
            self._wake()
            return
        reason = f": {exc}" if exc else ""
        self._fail(H1Error(f"the upstream closed the connection{reason}"))

    def pause_writing(self) -> None:
        self._write_ready = self.loop.create_future()

    def resume_writing(self) -> None:
        if not self._write_ready.done():
            self._write_ready.set_result(None)

    # -- httptools callbacks -------------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if 100 <= status < 200 and status != 101:  # interim (RFC 9110 §15.2): the final follows
            self.headers.clear()
            self._interim = True
            return
        self.status = status
        self.keep_alive = self.parser.should_keep_alive()  # only valid before the body
        self.headers_done = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        self.body.append(body)
        self.buffered += len(body)
        if self.buffered > HIGH_WATER and self.transport is not None:
            self.transport.pause_reading()
        waiter = self._waiter  # (``_wake``, inline: once per streamed event)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def on_message_complete(self) -> None:
        if self._interim:
            self._interim = False
            return
        self.complete = True
        self._wake()

    # -- helpers -------------------------------------------------------------------------------
    def _close_delimited(self) -> bool:
        return ("content-length" not in self.headers
                and "chunked" not in self.headers.get("transfer-encoding", "").lower())

    def _fail(self, error: H1Error) -> None:
        if self.error is None:
            self.error = error
        self._wake()
        if self.transport is not None:
            self.transport.close()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self, timeout: float | None) -> None:
        """Until the parser made progress (or failed, or ``timeout`` passed: H1Error)."""
        waiter = self._waiter = self.loop.create_future()
        timer = None if timeout is None else self.loop.call_later(
            timeout, _expire, waiter, timeout)
        try:
            await waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()

    async def send(self, data: bytes, timeout: float | None,
                   on_sent: Callable[[], None] | None = None) -> None:
        """Write ``data``; waits while the socket buffer is full (``timeout``: H1Error).
        ``on_sent()`` runs once the bytes are handed to the transport, before any wait."""
        assert self.transport is not None
        self.transport.write(data)
        if on_sent is not None:
            on_sent()
        if not self._write_ready.done():
            try:
                await asyncio.wait_for(asyncio.shield(self._write_ready), timeout)
            except TimeoutError as exc:
                raise H1Error(f"could not send the request within {timeout:g} s",
                              "timeout") from exc

    def take_body(self) -> bytes:
        out = b"".join(self.body)
        self.body.clear()
        if self.buffered > HIGH_WATER and self.transport is not None:
            self.transport.resume_reading()
        self.buffered = 0
        return out

    def reusable(self) -> bool:
        return self.complete and self.error is None and not self.closed and self.keep_alive

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


def _expire(waiter: asyncio.Future[None], timeout: float) -> None:
    if not waiter.done():
        waiter.set_exception(H1Error(f"no response data within {timeout:g} s", "timeout"))


class H1Response:
    """A response whose headers arrived; read the body with ``chunks()`` or ``read()``."""

    def __init__(self, client: H1Client, conn: _Connection) -> None:
        self._client = client
        self._conn: _Connection | None = conn
        self.status_code = conn.status
        self.headers = conn.headers

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives (chunked framing removed); H1Error if it breaks off."""
        conn = self._conn
        if conn is None:
            return
        while True:
            if conn.body:
                yield conn.take_body()
                continue
            if conn.error is not None:
                raise conn.error
            if conn.complete:
                break
            try:
                await conn.wait(self._client.read_timeout)
            except BaseException:
                conn.close()  # timed out or cancelled mid-body: the connection cannot be reused
                raise
        self._release()

    async def read(self) -> bytes:
        return b"".join([piece async for piece in self.chunks()])

    def _release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            self._client._release(conn)

    async def aclose(self) -> None:
        """Done with the response: a finished connection goes back to the pool, else closes."""
        conn, self._conn = self._conn, None
        if conn is not None:
            if conn.complete and not conn.body:
                self._client._release(conn)
            else:
                conn.close()


class H1Client:
    """Requests to one origin (``base_url``'s scheme, host and port) over pooled connections."""

    def __init__(self, base_url: str, *, connect_timeout: float = 10.0,
                 read_timeout: float | None = 600.0, max_idle: int = MAX_IDLE) -> None:
        if httptools is None:  # pragma: no cover
            raise RuntimeError("httptools is not installed")
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.tls = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.tls else 80)
        self.base_path = parts.path.rstrip("/")
        default = 443 if self.tls else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.host_header = host if self.port == default else f"{host}:{self.port}"
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.max_idle = max_idle
        self._idle: list[_Connection] = []
        self._ssl: ssl.SSLContext | None = None
        self._closed = False

    async def request(self, method: str, path: str, headers: dict[str, str],
                      body: bytes = b"", on_sent: Callable[[], None] | None = None) -> H1Response:
        """Send one request; returns once the response headers arrived. ``on_sent()`` (which
        must not raise) runs as soon as the request is handed to the socket — work that can
        overlap the server's (the proxy stores the turn's messages there) — and not at all
        when no connection could be had."""
        head = [f"{method} {self.base_path}{path} HTTP/1.1", f"Host: {self.host_header}",
                "Accept-Encoding: identity", f"Content-Length: {len(body)}"]
        head += [f"{name}: {value}" for name, value in headers.items()]
        data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
        conn = await self._acquire()
        try:
            await conn.send(data, self.read_timeout, on_sent)
            while not conn.headers_done:
                if conn.error is not None:
                    raise conn.error
                await conn.wait(self.read_timeout)
        except BaseException:
            conn.close()
            raise
        return H1Response(self, conn)

    async def _acquire(self) -> _Connection:
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed and conn.transport is not None \
                    and not conn.transport.is_closing():
                conn._reset()
                return conn
        if self._closed:
            raise H1Error("the client is closed")
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(loop.create_connection(
                lambda: _Connection(loop), self.host, self.port, ssl=self._context(),
                server_hostname=self.host if self.tls else None), self.connect_timeout)
        except TimeoutError as exc:
            raise H1Error(f"connecting took over {self.connect_timeout:g} s",
                          "timeout") from exc
        except (OSError, ssl.SSLError) as exc:
            raise H1Error(f"cannot connect: {exc}") from exc
        return conn

    def _context(self) -> ssl.SSLContext | None:
        if not self.tls:
            return None
        if self._ssl is None:
            cafile = os.environ.get("SSL_CERT_FILE") or _certifi_bundle()
            self._ssl = ssl.create_default_context(cafile=cafile)
        return self._ssl

    def _release(self, conn: _Connection) -> None:
        if conn.reusable() and not self._closed and len(self._idle) < self.max_idle:
            self._idle.append(conn)
        else:
            conn.close()

    async def aclose(self) -> None:
        self._closed = True
        while self._idle:
            self._idle.pop().close()


def _certifi_bundle() -> str | None:
    try:
        import certifi
    except ImportError:  # pragma: no cover - httpx depends on certifi
        return None
    return str(certifi.where())


def lean_client_for(base_url: str, **options: Any) -> H1Client | None:
    """An ``H1Client`` for ``base_url``, or None where httpx must stay: httptools missing, or a
    proxy from the environment (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY, NO_PROXY) applies."""
    if httptools is None:
        return None
    parts = urlsplit(base_url)
    proxies = urllib.request.getproxies()
    if (proxies.get(parts.scheme) or proxies.get("all")) and not urllib.request.proxy_bypass(
            parts.hostname or ""):
        return None
    return H1Client(base_url, **options)
