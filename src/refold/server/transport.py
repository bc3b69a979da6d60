"""The upstream HTTP transport: httpx's own, with a cheaper idle-connection check.

Why: before every request and after every response, httpcore's pool asks each idle keep-alive
connection whether the server closed it (``get_extra_info("is_readable")``). On the anyio
backend each ask rebuilds the stream's whole attribute table — ``getpeername()`` and all — just
to find the raw socket, then polls it. With tens of pooled connections that was the largest
single cost of a proxied turn on the event loop (profiled: ~1 ms of CPU per request at 10
concurrent streams). ``CachedSocketBackend`` wraps the network backend so each stream looks its
raw socket up once; the readability poll itself is unchanged, so a server-closed connection is
still noticed before it is reused.

Only httpx's default transport is touched, through one attribute of httpcore's pool
(``_network_backend``, stable across httpcore 1.x); if that attribute is missing (another
httpcore) the transport is used as it is — slower, never wrong. ``Upstream`` mounts it for
``all://`` instead of passing it as the client's transport, because httpx ignores proxies from
the environment (HTTPS_PROXY, NO_PROXY…) when given a transport; mounted, they still apply.
"""

from __future__ import annotations

import logging
import select
import socket
import sys
import typing
from typing import Any

import httpcore
import httpx

log = logging.getLogger(__name__)


def socket_readable(sock: socket.socket | None) -> bool:
    """True if a read would not block (data, or the peer's close); a gone socket counts."""
    fd = None if sock is None else sock.fileno()
    if fd is None or fd < 0:
        return True
    if sys.platform == "win32" or not hasattr(select, "poll"):
        ready, _, _ = select.select([fd], [], [], 0)
        return bool(ready)
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


class CachedSocketStream(httpcore.AsyncNetworkStream):
    """A network stream that remembers its raw socket for ``is_readable``."""

    def __init__(self, inner: httpcore.AsyncNetworkStream) -> None:
        self._inner = inner
        self._socket: socket.socket | None = inner.get_extra_info("socket")

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._inner.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                        timeout: float | None = None) -> httpcore.AsyncNetworkStream:
        return CachedSocketStream(await self._inner.start_tls(ssl_context, server_hostname,
                                                              timeout))

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            return socket_readable(self._socket)
        if info == "socket":
            return self._socket
        return self._inner.get_extra_info(info)


class CachedSocketBackend(httpcore.AsyncNetworkBackend):
    """Wraps a network backend; every stream it opens is a ``CachedSocketStream``."""

    def __init__(self, inner: httpcore.AsyncNetworkBackend) -> None:
        self._inner = inner

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None,
                          socket_options: typing.Iterable[Any] | None = None,
                          ) -> httpcore.AsyncNetworkStream:
        return CachedSocketStream(await self._inner.connect_tcp(
            host, port, timeout=timeout, local_address=local_address,
            socket_options=socket_options))

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: typing.Iterable[Any] | None = None,
                                  ) -> httpcore.AsyncNetworkStream:
        return CachedSocketStream(await self._inner.connect_unix_socket(
            path, timeout=timeout, socket_options=socket_options))

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def upstream_transport(limits: httpx.Limits) -> httpx.AsyncHTTPTransport:
    """httpx's default transport with ``limits``, its pool on a ``CachedSocketBackend``."""
    transport = httpx.AsyncHTTPTransport(limits=limits)
    pool = getattr(transport, "_pool", None)
    inner = getattr(pool, "_network_backend", None)
    if isinstance(inner, httpcore.AsyncNetworkBackend):
        pool._network_backend = CachedSocketBackend(inner)  # type: ignore[union-attr]
    else:
        log.debug("httpcore pool without _network_backend: idle checks stay uncached")
    return transport
