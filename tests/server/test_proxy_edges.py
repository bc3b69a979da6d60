"""HTTP edges of the proxy: client keys never go upstream, slow clients time out, deep JSON is a
400 on a connection that stays usable, and every response carries an ``X-Request-Id``."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import socket
import time
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refold.testing import serve

ProxyFactory = Callable[..., Any]


@pytest.fixture
def proxy_factory(start_one_proxy: ProxyFactory) -> ProxyFactory:
    return start_one_proxy


def _client(proxy: Any, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.base_url, api_key=key, max_retries=0)


def _ask(client: openai.OpenAI, text: str, stream: bool = False) -> str:
    messages: Any = [{"role": "user", "content": text}]
    if stream:
        parts = client.chat.completions.create(model="m", messages=messages, stream=True)
        return "".join(c.choices[0].delta.content or "" for c in parts if c.choices)
    reply = client.chat.completions.create(model="m", messages=messages)
    return reply.choices[0].message.content or ""


# -- client keys -----------------------------------------------------------------------------
def test_a_client_key_never_reaches_the_upstream_without_an_upstream_key(
        proxy_factory: ProxyFactory) -> None:
    with serve(["one", "two"]) as up:
        proxy = proxy_factory(up, api_keys=["client-key-1"])
        client = _client(proxy, "client-key-1")
        assert _ask(client, "hi") == "one"
        assert _ask(client, "again", stream=True) == "two"
        client.models.list()
    sent = [h.get("authorization") for h in up.llm.headers]
    assert len(sent) == 2 and all(a is None for a in sent), sent


def test_with_an_upstream_key_only_that_key_goes_upstream(proxy_factory: ProxyFactory) -> None:
    with serve(["ok"]) as up:
        proxy = proxy_factory(up, api_keys=["client-key-1"], upstream_api_key="up-secret")
        assert _ask(_client(proxy, "client-key-1"), "hi", stream=True) == "ok"
    assert [h.get("authorization") for h in up.llm.headers] == ["Bearer up-secret"]


def test_open_mode_passes_the_callers_own_bearer_through(proxy_factory: ProxyFactory) -> None:
    with serve(["ok"]) as up:
        proxy = proxy_factory(up)  # no client keys: refold is a transparent hop
        assert _ask(_client(proxy, "callers-provider-key"), "hi") == "ok"
    assert up.llm.headers[0]["authorization"] == "Bearer callers-provider-key"


# -- slow clients ----------------------------------------------------------------------------
def _port(proxy: Any) -> int:
    return int(proxy.base_url.rsplit(":", 1)[1].split("/")[0])


def _closed_within(sock: socket.socket, seconds: float) -> bytes | None:
    """What the server sent before closing, or None if it is still open after ``seconds``."""
    sock.settimeout(seconds)
    got = b""
    try:
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                return got
            got += chunk
    except TimeoutError:
        return None


def test_trickling_and_silent_connections_are_closed(proxy_factory: ProxyFactory) -> None:
    with serve([]) as up:
        proxy = proxy_factory(up, header_timeout=0.6)
        port = _port(proxy)
        silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(10)]
        trickling = [socket.create_connection(("127.0.0.1", port)) for _ in range(10)]
        for sock in trickling:
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        for _ in range(3):  # keep trickling header bytes past the timeout
            time.sleep(0.3)
            for sock in trickling:
                with contextlib.suppress(OSError):
                    sock.sendall(b"X-A: b\r\n")
        results = [_closed_within(s, 3.0) for s in silent + trickling]
        for sock in silent + trickling:
            sock.close()
        assert all(r is not None for r in results), "a slow connection stayed open"
        assert all(b" 408 " in r for r in results if r), results[:2]
        # the server still serves normal clients
        assert httpx.get(proxy.base_url + "/models").status_code == 200


def test_a_body_that_never_finishes_gets_a_408(proxy_factory: ProxyFactory) -> None:
    with serve([]) as up:
        proxy = proxy_factory(up, body_timeout=0.5)
        sock = socket.create_connection(("127.0.0.1", _port(proxy)))
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"mo")
        got = _closed_within(sock, 5.0)
        sock.close()
        assert got is not None and got.startswith(b"HTTP/1.1 408"), got
        assert up.llm.requests == []


def test_keep_alive_connections_get_a_header_timeout_per_request(
        proxy_factory: ProxyFactory) -> None:
    with serve(["a", "b"]) as up:
        proxy = proxy_factory(up, header_timeout=0.5)
        with httpx.Client() as http:
            body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
            first = http.post(proxy.base_url + "/chat/completions", json=body)
            time.sleep(0.2)  # within uvicorn's keep-alive window, longer than nothing
            second = http.post(proxy.base_url + "/chat/completions",
                               json={**body, "messages": [*body["messages"],
                                                          {"role": "assistant", "content": "a"},
                                                          {"role": "user", "content": "y"}]})
        assert (first.status_code, second.status_code) == (200, 200)


# -- nesting depth ---------------------------------------------------------------------------
@pytest.mark.parametrize("depth", [150, 5_000, 100_000])
def test_deep_json_is_a_400_and_the_connection_stays_usable(
        proxy_factory: ProxyFactory, depth: int) -> None:
    with serve(["fine"]) as up:
        proxy = proxy_factory(up, max_json_depth=100)
        deep = "[" * depth + "]" * depth
        raw = '{"model": "m", "messages": [{"role": "user", "content": "x"}], "x": ' + deep + "}"
        with httpx.Client() as http:
            bad = http.post(proxy.base_url + "/chat/completions", content=raw,
                            headers={"content-type": "application/json"})
            good = http.post(proxy.base_url + "/chat/completions", json={
                "model": "m", "messages": [{"role": "user", "content": "y"}]})
        assert bad.status_code == 400, bad.text
        assert "deeper than 100" in bad.json()["error"]["message"]
        assert bad.headers.get("connection") != "close"
        assert good.status_code == 200 and good.json()["choices"][0]["message"]["content"] == "fine"
        assert len(up.llm.requests) == 1


def test_ordinary_nested_tool_schemas_pass(proxy_factory: ProxyFactory) -> None:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(20):
        schema = {"type": "object", "properties": {"p": schema}}
    tools = [{"type": "function", "function": {"name": "f", "parameters": schema}}]
    with serve(["ok"]) as up:
        proxy = proxy_factory(up)
        reply = _client(proxy, "k").chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}], tools=tools)  # type: ignore[arg-type]
        assert reply.choices[0].message.content == "ok"
        assert json.dumps(up.llm.requests[0]["tools"]) == json.dumps(tools)


# -- request ids -----------------------------------------------------------------------------
def test_request_id_is_echoed_or_generated(proxy_factory: ProxyFactory) -> None:
    with serve(["ok", "ok"]) as up:
        proxy = proxy_factory(up, api_keys=["k"])
        body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
        auth = {"Authorization": "Bearer k"}
        given = httpx.post(proxy.base_url + "/chat/completions", json=body,
                           headers={**auth, "X-Request-Id": "trace-42"})
        made = httpx.post(proxy.base_url + "/chat/completions", json=body, headers=auth)
        refused = httpx.get(proxy.base_url + "/refold/sessions")
        junk = httpx.get(proxy.base_url + "/refold/sessions",
                         headers={**auth, "X-Request-Id": "bad id\twith spaces"})
        raw = _client(proxy, "k").chat.completions.with_raw_response.create(
            model="m", messages=[{"role": "user", "content": "x"}], stream=True,
            extra_headers={"X-Request-Id": "stream-7"})
        raw.parse().close()
    assert given.headers["x-request-id"] == "trace-42"
    assert re.fullmatch(r"[0-9a-f]{32}", made.headers["x-request-id"])
    assert refused.status_code == 401 and refused.headers["x-request-id"]
    assert junk.headers["x-request-id"] != "bad id\twith spaces"
    assert raw.headers["x-request-id"] == "stream-7"
    generated = {made.headers["x-request-id"], refused.headers["x-request-id"],
                 junk.headers["x-request-id"]}
    assert len(generated) == 3  # each response its own


def test_generated_request_ids_are_unique_per_process_and_after_fork() -> None:
    from refold.server.edges import request_id_of

    ids = {request_id_of([]) for _ in range(1000)}
    assert len(ids) == 1000 and all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child (a forked worker) writes its next id and leaves at once
        os.write(write, request_id_of([]).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    child = os.read(read, 64).decode()
    os.close(read)
    ours = request_id_of([])
    assert re.fullmatch(r"[0-9a-f]{32}", child)
    assert child[:16] != ours[:16] and child not in ids  # its own prefix, not a repeat of ours


def test_request_id_is_logged_with_an_upstream_failure(proxy_factory: ProxyFactory,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{dead.getsockname()[1]}/v1"
    dead.close()  # nothing listens there
    proxy = proxy_factory(url)
    with caplog.at_level(logging.WARNING, logger="refold.server.app"):
        response = httpx.post(proxy.base_url + "/chat/completions",
                              json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
                              headers={"X-Request-Id": "find-me-9"})
    assert response.status_code == 502 and response.headers["x-request-id"] == "find-me-9"
    assert any("find-me-9" in r.getMessage() for r in caplog.records)


def _depth(value: Any) -> int:
    """How deep ``value`` nests (a scalar 0, ``[]`` 1), recursively (the reference)."""
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


_JSON = st.recursive(st.none() | st.integers() | st.text(max_size=3),
                     lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(max_size=2), inner, max_size=3), max_leaves=40)


@settings(max_examples=300, deadline=None)
@given(_JSON, st.integers(1, 12))
def test_the_depth_check_refuses_exactly_what_nests_deeper_than_the_limit(
        value: Any, limit: int) -> None:
    from refold import jsonscan
    from refold.errors import InvalidInput
    from refold.server.edges import check_depth

    raw = json.dumps(value).encode()
    deep = _depth(value) > limit
    for native in (True, False):  # the C scan where built, and the walk of the value
        with pytest.MonkeyPatch.context() as patch:
            if not native:
                patch.setattr(jsonscan, "_native", None)
            try:
                check_depth(raw, value, limit)
            except InvalidInput:
                assert deep
            else:
                assert not deep
