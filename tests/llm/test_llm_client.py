"""HttpChatClient against the scripted server over a real socket, and failure classification."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import httpx
import pytest

from refold.errors import ContextOverflowError, InvalidInput, UpstreamError
from refold.llm import ChatClient, HttpChatClient, classify_http_error
from refold.testing import RunningLLM, ScriptedReply, serve

MSGS = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def server() -> Iterator[RunningLLM]:
    """One scripted server for the module (each test pushes its replies; shutdown is slow)."""
    with serve() as s:
        yield s


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_complete_returns_message_usage_and_sends_body() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
    with serve(["hello", ScriptedReply(content=None, tool_calls=[call])]) as s, \
            HttpChatClient(s.base_url, api_key="sk-test") as client:
        assert isinstance(client, ChatClient)
        result = client.complete([*MSGS, {"role": "user", "content": "x", "_meta": 1}],
                                 model="m1", max_tokens=50,
                                 tools=[{"type": "function", "function": {"name": "ls"}}])
        assert result.message == {"role": "assistant", "content": "hello"}
        assert result.finish_reason == "stop"
        assert result.prompt_tokens and result.prompt_tokens > 0
        body = s.llm.requests[0]
        assert body["model"] == "m1" and body["max_tokens"] == 50 and body["tools"]
        assert all("_meta" not in m for m in body["messages"])
        assert s.llm.headers[0]["authorization"] == "Bearer sk-test"
        second = client.complete(MSGS, model="m1")
        assert second.message["tool_calls"] == [call]
        assert second.finish_reason == "tool_calls"


@pytest.mark.parametrize(("reply", "kind"), [
    (ScriptedReply(status=401), "auth"),
    (ScriptedReply(status=403), "auth"),
    (ScriptedReply(status=402), "quota"),
    (ScriptedReply(status=429, error={"error": {"message": "You exceeded your current quota",
                                                "code": "insufficient_quota"}}), "quota"),
    (ScriptedReply(status=429, error={"error": {"message": "slow down"}}), "rate_limit"),
    (ScriptedReply(status=500), "server"),
    (ScriptedReply(status=503), "server"),
    (ScriptedReply(status=404, error={"error": {"message": "model not found"}}), "bad_request"),
    (ScriptedReply(status=400, error={"error": {"message": "bad role"}}), "bad_request"),
    (ScriptedReply(raw_body=b"<html>oops"), "bad_response"),
    (ScriptedReply(raw_body=b'{"choices": []}'), "bad_response"),
    (ScriptedReply(raw_body=b'[1, 2]'), "bad_response"),
    (ScriptedReply(content=""), "bad_response"),
    (ScriptedReply(content=None), "bad_response"),
    (ScriptedReply(drop_connection=True), "network"),
])
def test_failures_are_classified(server: RunningLLM, reply: ScriptedReply, kind: str) -> None:
    server.llm.push(reply)
    with HttpChatClient(server.base_url) as client, pytest.raises(UpstreamError) as info:
        client.complete(MSGS, model="m")
    assert info.value.kind == kind
    assert "sk-" not in str(info.value)


def test_overflow_from_server_is_context_overflow_error() -> None:
    with serve(max_context_tokens=5) as s, HttpChatClient(s.base_url) as client, \
            pytest.raises(ContextOverflowError) as info:
        client.complete([{"role": "user", "content": "x" * 400}], model="m")
    assert info.value.kind == "overflow" and info.value.status == 400


def test_timeout_is_classified() -> None:
    with serve([ScriptedReply(delay=1.0)]) as s, HttpChatClient(s.base_url) as client, \
            pytest.raises(UpstreamError) as info:
        client.complete(MSGS, model="m", timeout=0.2)
    assert info.value.kind == "timeout"


def test_connection_refused_is_network() -> None:
    with HttpChatClient(f"http://127.0.0.1:{_free_port()}/v1") as client, \
            pytest.raises(UpstreamError) as info:
        client.complete(MSGS, model="m")
    assert info.value.kind == "network"


def test_injectable_transport() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        assert json.loads(request.content)["model"] == "m"
        return httpx.Response(200, json={"choices": [{"message": {"role": "assistant",
                                                                  "content": "via mock"},
                                                      "finish_reason": "length"}]})
    client = HttpChatClient("http://x/v1", transport=httpx.MockTransport(handler))
    result = client.complete(MSGS, model="m")
    assert result.message["content"] == "via mock" and result.finish_reason == "length"
    assert result.usage == {}


def test_bad_base_url() -> None:
    with pytest.raises(InvalidInput):
        HttpChatClient("localhost:8000")


@pytest.mark.parametrize(("status", "body", "kind"), [
    (400, '{"error":{"code":"context_length_exceeded","message":"too long"}}', "overflow"),
    (400, "This model's maximum context length is 8192 tokens", "overflow"),
    (400, '{"error":{"message":"prompt is too long: 210000 tokens > 200000 maximum"}}',
     "overflow"),
    (413, "Payload Too Large", "overflow"),
    (429, '{"error":{"message":"Extra usage is required for long context requests"}}',
     "overflow"),
    (429, '{"error":{"message":"Rate limit reached for requests"}}', "rate_limit"),
    (400, '{"error":{"message":"max_tokens must be positive"}}', "bad_request"),
    (402, "", "quota"),
    (408, "", "timeout"),
    (502, "bad gateway", "server"),
    (418, "teapot", "bad_request"),
])
def test_classify_http_error(status: int, body: str, kind: str) -> None:
    err = classify_http_error(status, body)
    assert err.kind == kind and err.status == status
    assert isinstance(err, ContextOverflowError) == (kind == "overflow")
    assert str(status) in str(err)
