"""The one upstream ``Transport`` interface: both implementations, on real sockets against the
scripted server, behave the same (keep-alive reuse, errors classified, rate-limit headers kept);
proxies from the environment route to httpx."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpcore
import httpx
import pytest

from refold.errors import UpstreamError
from refold.server.transport import H1Transport, HttpxTransport, transport_for
from refold.server.upstream import Upstream
from refold.testing import ScriptedReply, serve

BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()


@pytest.fixture(autouse=True)
def _no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy",
                 "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("prefer", ["h1", "httpx"])
def test_both_transports_complete_and_reuse_one_connection(prefer: str) -> None:
    async def run(base_url: str) -> list[str]:
        upstream = Upstream(base_url, prefer=prefer)
        assert upstream.transport.name == prefer
        try:
            return [str((await upstream.complete(BODY, None))["choices"][0]["message"]["content"])
                    for _ in range(3)]
        finally:
            await upstream.aclose()

    with serve(["a", "b", "c"]) as llm:
        assert asyncio.run(run(llm.base_url)) == ["a", "b", "c"]


@pytest.mark.parametrize("prefer", ["h1", "httpx"])
def test_a_429_keeps_its_retry_after_and_rate_limit_headers(prefer: str) -> None:
    headers = {"Retry-After": "7", "x-ratelimit-remaining-requests": "0",
               "x-ratelimit-reset-requests": "7s", "X-Other": "dropped"}
    reply = ScriptedReply(status=429, headers=headers,
                          error={"error": {"message": "slow down", "type": "rate_limit"}})

    async def run(base_url: str) -> UpstreamError:
        upstream = Upstream(base_url, prefer=prefer)
        try:
            with pytest.raises(UpstreamError) as caught:
                await upstream.complete(BODY, None)
            return caught.value
        finally:
            await upstream.aclose()

    with serve([reply]) as llm:
        err = asyncio.run(run(llm.base_url))
    assert err.kind == "rate_limit" and err.status == 429
    assert err.headers == {"retry-after": "7", "x-ratelimit-remaining-requests": "0",
                           "x-ratelimit-reset-requests": "7s"}


def test_an_unreachable_upstream_is_a_network_error_on_both() -> None:
    async def run(prefer: str) -> UpstreamError:
        upstream = Upstream("http://127.0.0.1:9/v1", prefer=prefer, connect_timeout=2)
        try:
            with pytest.raises(UpstreamError) as caught:
                await upstream.complete(BODY, None)
            return caught.value
        finally:
            await upstream.aclose()

    assert asyncio.run(run("h1")).kind == asyncio.run(run("httpx")).kind == "network"


def test_proxies_from_the_environment_route_to_httpx(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "internal.example")
    transport = transport_for("https://api.example/v1", read_timeout=5, connect_timeout=5)
    assert isinstance(transport, HttpxTransport)
    client: Any = transport.client
    proxied = client._transport_for_url(httpx.URL("https://api.example/v1/models"))
    assert isinstance(proxied._pool, httpcore.AsyncHTTPProxy)
    bypassed = transport_for("https://internal.example/v1", read_timeout=5, connect_timeout=5)
    assert isinstance(bypassed, H1Transport)
    asyncio.run(transport.aclose())
    asyncio.run(bypassed.aclose())


def test_an_injected_httpx_transport_is_used() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        return httpx.Response(200, json={"object": "list", "data": []})

    async def run() -> dict[str, Any]:
        upstream = Upstream("http://upstream.test/v1", transport=httpx.MockTransport(handler))
        try:
            return await upstream.models(None)
        finally:
            await upstream.aclose()

    assert asyncio.run(run()) == {"object": "list", "data": []}
    assert seen == ["/v1/models"]
