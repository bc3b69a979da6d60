"""The proxy's HTTP edges: slow clients, hostile JSON, and a request id on every exchange.

- **Header timeout.** A connection must finish sending a request's headers within
  ``header_timeout`` seconds of opening (or of starting its next request on a keep-alive
  connection); otherwise it gets a 408 and is closed. uvicorn arms no timer before a first
  request, so without this a client that trickles its headers (or sends nothing) holds a
  connection for ever. The guard is a small subclass of uvicorn's httptools protocol that only
  adds a timer around the parser's ``on_message_begin`` / ``on_headers_complete`` callbacks.
- **Body timeout.** ``read_body`` (in ``app``) reads the whole body within ``body_timeout``
  seconds, else ``RequestTimeout`` (a 408 that closes the connection).
- **Nesting depth.** ``check_depth`` refuses JSON nested deeper than ``max_json_depth`` with a
  400 (``InvalidInput``) instead of a ``RecursionError`` somewhere downstream.
- **Request ids.** ``RequestIdMiddleware`` echoes the client's ``X-Request-Id`` (a sane one) or
  generates one, sets it on the response, and keeps it in ``current_request_id`` so the
  server's log lines name it.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import logging
import os
import re
import uuid
from typing import Any

from refold import jsonscan
from refold.errors import InvalidInput

log = logging.getLogger(__name__)

REQUEST_ID_HEADER = b"x-request-id"
_SANE_ID = re.compile(rb"^[A-Za-z0-9._:/+=@-]{1,128}$")
_TIMEOUT_RESPONSE = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
                     b"connection: close\r\ncontent-length: %d\r\n\r\n%s")
_TIMEOUT_BODY = (b'{"error":{"message":"the request headers did not arrive in time",'
                 b'"type":"invalid_request_error","code":"request_timeout"}}')

current_request_id: contextvars.ContextVar[str] = contextvars.ContextVar(
    "refold_request_id", default="-")


class RequestTimeout(Exception):
    """The client did not send its request body in time (``app`` answers 408)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"the request body did not arrive within {seconds:g} s")
        self.seconds = seconds


# -- request ids -----------------------------------------------------------------------------
class _Ids:
    """Fresh request ids: a random per-process prefix and a counter (no random read per
    request); a forked worker draws its own prefix."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.prefix = uuid.uuid4().hex[:16]
        self.counter = itertools.count(1)

    def next(self) -> str:
        return f"{self.prefix}{next(self.counter):016x}"


_ids = _Ids()
os.register_at_fork(after_in_child=_ids.reset)


def request_id_of(headers: list[tuple[bytes, bytes]]) -> str:
    """The client's ``X-Request-Id`` when it is a sane token, else a fresh one."""
    for name, value in headers:
        if name == REQUEST_ID_HEADER and _SANE_ID.match(value):
            return value.decode("ascii")
    return _ids.next()


class RequestIdMiddleware:
    """Pure ASGI middleware: every HTTP response carries ``X-Request-Id``."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = request_id_of(scope.get("headers") or [])
        # each request runs in its own task (a copied context), so the id is never reset:
        # the outermost error handler, which runs after this middleware, still sees it
        current_request_id.set(rid)
        raw = rid.encode("ascii")

        answered = False

        async def send_with_id(message: Any) -> None:
            nonlocal answered
            if message["type"] == "http.response.start":
                headers = [h for h in message.get("headers", ())
                           if h[0].lower() != REQUEST_ID_HEADER]
                message = dict(message, headers=[*headers, (REQUEST_ID_HEADER, raw)])
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                answered = True
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception:
            if not answered:
                raise
            # the app's error handler answered (a 500) and logged it; raised on, the server
            # would close the client's keep-alive connection under its next request


# -- JSON depth ------------------------------------------------------------------------------
def check_depth(raw: bytes, value: Any, limit: int) -> None:
    """``InvalidInput`` when ``value`` (parsed from ``raw``) nests deeper than ``limit``.

    ``refold._jsonscan`` scans the bytes (an agent's 350 KB request: ~0.03 ms). Without it, a
    body with fewer brackets than ``limit`` cannot be that deep (two ``bytes.count`` calls),
    and any other has its value walked.
    """
    deeper = jsonscan.deeper_than(raw, limit)  # the bytes scanned in C: ~20x the walk
    if deeper is not None:
        if deeper:
            raise too_deep(limit)
        return
    if raw.count(b"[") + raw.count(b"{") < limit:  # (~0.1 ms each on 350 KB: slower than C)
        return
    # without the C module, level by level: a list comprehension per container (an agent's
    # request of 300 messages and 350 KB: ~0.6 ms; a stack of (node, depth) pairs filtered by
    # ``isinstance(v, dict | list)``, which builds the union at every call, took ~3.8 ms)
    level = [value] if isinstance(value, _CONTAINERS) else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            raise too_deep(limit)
        below: list[Any] = []
        for node in level:
            below += [v for v in (node.values() if isinstance(node, dict) else node)
                      if isinstance(v, _CONTAINERS)]
        level = below


_CONTAINERS = (dict, list)


def too_deep(limit: int) -> InvalidInput:
    return InvalidInput(f"the request body nests JSON deeper than {limit} levels",
                        hint="raise max_json_depth (REFOLD_MAX_JSON_DEPTH) if this is intended")


# -- header timeout --------------------------------------------------------------------------
def guarded_protocol(header_timeout: float) -> type[asyncio.Protocol] | str:
    """uvicorn's httptools protocol with a header timeout ("auto" when httptools is missing:
    uvicorn's h11 protocol then serves without one)."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # pragma: no cover - httptools is part of the server extra
        log.warning("httptools is not installed: no header timeout for slow clients")
        return "auto"

    class HeaderTimeoutProtocol(HttpToolsProtocol):
        """Closes a connection whose request headers do not arrive within the timeout."""

        _header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            if self._header_timer is None:
                self._arm()

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._header_timer = self.loop.call_later(header_timeout, self._headers_late)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_late(self) -> None:
            self._header_timer = None
            if self.transport.is_closing():
                return
            busy = self.cycle is not None and not self.cycle.response_complete
            if busy:  # a response is still being written; the next request waits for it
                self._arm()
                return
            log.info("closing a connection from %s: no request headers in %.0f s",
                     self.client, header_timeout)
            self.transport.write(_TIMEOUT_RESPONSE % (len(_TIMEOUT_BODY), _TIMEOUT_BODY))
            self.transport.close()

    return HeaderTimeoutProtocol


__all__ = ["RequestIdMiddleware", "RequestTimeout", "check_depth", "current_request_id",
           "guarded_protocol", "request_id_of", "too_deep"]
