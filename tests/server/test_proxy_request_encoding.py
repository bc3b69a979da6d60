"""How a request reaches a route: a trailing slash, a compressed body. ``POST
/v1/chat/completions/`` was a 307 redirect (an SDK does not follow one for a POST, so the call
failed) and a gzip-encoded body a 400 saying the body was not UTF-8."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from refold.testing import serve

ProxyFactory = Callable[..., Any]
BODY = b'{"model":"m","messages":[{"role":"user","content":"hello there"}]}'


def test_a_trailing_slash_reaches_the_route(start_one_proxy: ProxyFactory) -> None:
    with serve() as up, httpx.Client(timeout=10) as client:
        proxy = start_one_proxy(up)
        for path in ("/chat/completions/", "/messages/", "/models/"):
            method = "GET" if path == "/models/" else "POST"
            body = BODY if path != "/messages/" else (
                b'{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}')
            reply = client.request(method, proxy.base_url + path, content=body,
                                   headers={"content-type": "application/json"})
            assert reply.status_code == 200, (path, reply.status_code, reply.text)


@pytest.mark.parametrize("coding,encode", [("gzip", gzip.compress), ("deflate", zlib.compress)])
def test_a_compressed_body_is_read(start_one_proxy: ProxyFactory, coding: str,
                                   encode: Callable[[bytes], bytes]) -> None:
    with serve() as up, httpx.Client(timeout=10) as client:
        proxy = start_one_proxy(up)
        reply = client.post(proxy.base_url + "/chat/completions", content=encode(BODY),
                            headers={"content-type": "application/json",
                                     "content-encoding": coding})
        assert reply.status_code == 200, reply.text
        assert up.llm.requests[-1]["messages"] == [{"role": "user", "content": "hello there"}]


def test_an_unknown_encoding_or_a_bomb_is_refused_clearly(start_one_proxy: ProxyFactory) -> None:
    with serve() as up, httpx.Client(timeout=10) as client:
        proxy = start_one_proxy(up, max_body_bytes=100_000)
        odd = client.post(proxy.base_url + "/chat/completions", content=BODY,
                          headers={"content-type": "application/json", "content-encoding": "br"})
        assert odd.status_code == 415 and "'br' is not supported" in odd.json()["error"]["message"]
        bomb = gzip.compress(b"[" + b" " * 1_000_000 + b"]")  # ~1 KB that inflates to 1 MB
        big = client.post(proxy.base_url + "/chat/completions", content=bomb,
                          headers={"content-type": "application/json",
                                   "content-encoding": "gzip"})
        assert big.status_code == 413
        broken = client.post(proxy.base_url + "/chat/completions", content=b"not gzip",
                             headers={"content-type": "application/json",
                                      "content-encoding": "gzip"})
        assert broken.status_code == 400 and "not valid gzip" in broken.json()["error"]["message"]
        assert not up.llm.requests  # none of them went upstream
