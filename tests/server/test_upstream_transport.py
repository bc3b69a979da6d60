"""The upstream transport's cached idle check, on real sockets against the scripted server."""

from __future__ import annotations

import asyncio
import socket

import httpcore
import httpx
import pytest

from refold.server.transport import CachedSocketBackend, socket_readable, upstream_transport
from refold.testing import serve


def test_socket_readable_sees_data_and_the_peer_closing() -> None:
    a, b = socket.socketpair()
    try:
        assert not socket_readable(a)
        b.sendall(b"x")
        assert socket_readable(a)
        a.recv(1)
        b.close()
        assert socket_readable(a)  # the peer closed: a read would return b"" at once
    finally:
        a.close()
    assert socket_readable(None)


def test_the_pool_reuses_connections_and_notices_a_server_close() -> None:
    limits = httpx.Limits(max_connections=10, max_keepalive_connections=10)
    transport = upstream_transport(limits)
    pool = transport._pool
    assert isinstance(pool._network_backend, CachedSocketBackend)

    async def run(base_url: str) -> tuple[int, int]:
        async with httpx.AsyncClient(transport=transport) as client:
            for _ in range(3):
                (await client.get(base_url + "/models")).raise_for_status()
            reused = len(pool.connections)
            for connection in pool.connections:  # the server side goes away while idle
                stream = connection._connection._network_stream
                stream.get_extra_info("socket").shutdown(socket.SHUT_RDWR)
            (await client.get(base_url + "/models")).raise_for_status()  # a fresh connection
            return reused, len(pool.connections)

    with serve(["unused"]) as llm:
        reused, after = asyncio.run(run(llm.base_url))
    assert reused == 1  # keep-alive: three sequential requests, one connection
    assert after == 1


def test_proxies_from_the_environment_still_apply(monkeypatch: pytest.MonkeyPatch) -> None:
    from refold.server.upstream import Upstream

    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "internal.example")
    upstream = Upstream("https://api.example/v1")
    client = upstream._http
    proxied = client._transport_for_url(httpx.URL("https://api.example/v1/models"))
    direct = client._transport_for_url(httpx.URL("http://127.0.0.1:8000/v1/models"))
    assert proxied is not direct
    assert isinstance(direct._pool._network_backend, CachedSocketBackend)  # type: ignore[attr-defined]
    assert isinstance(proxied._pool, httpcore.AsyncHTTPProxy)  # type: ignore[attr-defined]
    asyncio.run(upstream.aclose())
