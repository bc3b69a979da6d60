"""The HTTP edges of ``/v1/messages``, ``/v1/messages/count_tokens`` and ``/v1/responses``:
the same body reader as ``/v1/chat/completions`` (the JSON depth limit, the body timeout), each
answering in its provider's error shape; and an exception no endpoint answered is a 500 in
Anthropic's shape under ``/v1/messages``. Before, those endpoints read the body without the
timeout (a client that stopped mid-body never got an answer) and parsed it without the depth
limit (150 levels passed, 5,000 were a 500 with a RecursionError logged), and a crash under
``/v1/messages`` answered in OpenAI's shape."""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from refold.testing import serve

ProxyFactory = Callable[..., Any]
MESSAGES = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}


def _anthropic_shaped(reply: httpx.Response) -> dict[str, Any]:
    body = reply.json()
    assert body["type"] == "error" and set(body["error"]) == {"type", "message"}, body
    return dict(body["error"])


def _openai_shaped(reply: httpx.Response) -> dict[str, Any]:
    body = reply.json()
    assert set(body) == {"error"} and {"message", "type", "code"} <= set(body["error"]), body
    return dict(body["error"])


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens", "/v1/responses"])
@pytest.mark.parametrize("depth", [150, 5_000])
def test_deep_json_is_a_400_in_the_endpoints_shape(
        start_one_proxy: ProxyFactory, caplog: pytest.LogCaptureFixture, path: str,
        depth: int) -> None:
    deep = "[" * depth + "]" * depth
    raw = ('{"model": "m", "max_tokens": 5, "input": "hi", "metadata": {"x": ' + deep + '}, '
           '"messages": [{"role": "user", "content": "hi"}]}')
    with serve(["fine"]) as up, httpx.Client(timeout=30) as http:
        proxy = start_one_proxy(up, max_json_depth=100)
        with caplog.at_level(logging.ERROR):
            bad = http.post(proxy.root + path, content=raw,
                            headers={"content-type": "application/json"})
        assert bad.status_code == 400, bad.text
        error = (_anthropic_shaped(bad) if path.startswith("/v1/messages")
                 else _openai_shaped(bad))
        assert "deeper than 100" in error["message"]
        assert bad.headers.get("connection") != "close"
        assert up.llm.requests == []
    assert "RecursionError" not in caplog.text


def _port(proxy: Any) -> int:
    return int(proxy.base_url.rsplit(":", 1)[1].split("/")[0])


def _answer_within(sock: socket.socket, seconds: float) -> bytes | None:
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


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens", "/v1/responses"])
def test_a_body_that_never_finishes_gets_a_408_in_the_endpoints_shape(
        start_one_proxy: ProxyFactory, path: str) -> None:
    with serve([]) as up:
        proxy = start_one_proxy(up, body_timeout=0.5)
        sock = socket.create_connection(("127.0.0.1", _port(proxy)))
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     "Content-Length: 1000\r\n\r\n{\"mo".encode())
        got = _answer_within(sock, 5.0)
        sock.close()
        assert got is not None, "no answer: the body timeout was not applied"
        assert got.startswith(b"HTTP/1.1 408"), got
        body = got.split(b"\r\n\r\n", 1)[1]
        if path.startswith("/v1/messages"):
            assert body.startswith(b'{"type":"error"'), body
        else:
            assert body.startswith(b'{"error":'), body
        assert b"did not arrive within" in body
        assert up.llm.requests == []


def test_an_unexpected_error_under_v1_messages_is_a_500_in_anthropics_shape(
        start_one_proxy: ProxyFactory, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    from refold.server import messages_api

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(messages_api, "create_message", broken)
    monkeypatch.setattr(messages_api, "count_tokens_of", broken)
    with serve(["ok"]) as up, httpx.Client(timeout=30) as http:
        proxy = start_one_proxy(up)
        with caplog.at_level(logging.ERROR):
            crashed = http.post(proxy.root + "/v1/messages", json=MESSAGES)
            counted = http.post(proxy.root + "/v1/messages/count_tokens", json=MESSAGES)
        for reply in (crashed, counted):
            assert reply.status_code == 500, reply.text
            error = _anthropic_shaped(reply)
            assert error["type"] == "api_error"
            assert "RuntimeError" in error["message"]
            assert reply.headers["x-request-id"]
        # the keep-alive connection still serves, and the chat endpoint keeps OpenAI's shape
        chat = http.post(proxy.base_url + "/chat/completions",
                         json={"model": "m", "messages": [{"role": "user", "content": "x"}]})
        assert chat.status_code == 200, chat.text
    assert "unexpected error serving POST /v1/messages" in caplog.text  # still logged


def test_an_unknown_path_under_v1_messages_is_a_404_in_anthropics_shape(
        start_one_proxy: ProxyFactory) -> None:
    with serve([]) as up, httpx.Client(timeout=30) as http:
        proxy = start_one_proxy(up)
        missing = http.post(proxy.root + "/v1/messages/batches", json=MESSAGES)
        elsewhere = http.post(proxy.root + "/v1/nowhere", json=MESSAGES)
    assert missing.status_code == 404
    assert _anthropic_shaped(missing)["type"] == "not_found_error"
    assert elsewhere.status_code == 404
    assert _openai_shaped(elsewhere)["type"] == "not_found_error"
