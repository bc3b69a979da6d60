"""``POST /v1/messages``: an upstream 429's ``Retry-After``, ``retry-after-ms`` and
``x-ratelimit-*`` reach the client, as on ``/v1/chat/completions`` and ``/v1/responses``.

They were dropped: the endpoint re-rendered the app's error response in Anthropic's shape
without its headers, so an Anthropic SDK (which honours ``retry-after-ms`` and ``Retry-After``)
retried blind. The official anthropic SDK over a socket, JSON and streamed (the upstream's
429 comes before any byte of the stream, so it is a plain error response there too).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import pytest

from refold.testing import ScriptedReply, serve

ProxyFactory = Callable[..., Any]
LIMITS = {"Retry-After": "7", "retry-after-ms": "7000", "x-ratelimit-remaining-requests": "0",
          "x-ratelimit-reset-tokens": "6s"}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_an_upstream_429_passes_retry_after_and_rate_limit_headers(
        start_one_proxy: ProxyFactory, stream: bool) -> None:
    limited = ScriptedReply(status=429, headers=LIMITS,
                            error={"error": {"message": "slow down", "type": "rate_limit"}})
    with serve([limited]) as up:
        proxy = start_one_proxy(up)
        sdk = anthropic.Anthropic(base_url=proxy.root, api_key="none", max_retries=0,
                                  timeout=30)
        messages: Any = [{"role": "user", "content": "hi"}]
        with pytest.raises(anthropic.RateLimitError) as caught:
            if stream:
                with sdk.messages.stream(model="claude-scripted", max_tokens=5,
                                         messages=messages) as events:
                    events.get_final_message()
            else:
                sdk.messages.create(model="claude-scripted", max_tokens=5, messages=messages)
    error = caught.value
    body: Any = error.body  # still Anthropic's error shape
    assert error.status_code == 429 and body["type"] == "error"
    assert body["error"]["type"] == "rate_limit_error" and "slow down" in body["error"]["message"]
    headers = error.response.headers
    assert headers["retry-after"] == "7"
    assert headers["retry-after-ms"] == "7000"
    assert headers["x-ratelimit-remaining-requests"] == "0"
    assert headers["x-ratelimit-reset-tokens"] == "6s"
    assert headers["content-type"] == "application/json"
    assert int(headers["content-length"]) == len(error.response.content)


def test_an_anthropic_upstreams_429_headers_reach_the_client(
        start_one_proxy: ProxyFactory) -> None:
    """With ``upstream_format = "anthropic"`` the upstream's error headers were never kept:
    its ``retry-after`` and ``anthropic-ratelimit-*`` reach the client now, on
    ``/v1/messages`` and on chat completions alike."""
    import openai

    from refold.testing import AnthropicReply, serve_anthropic

    limits = {"retry-after": "9", "anthropic-ratelimit-requests-remaining": "0"}
    limited = AnthropicReply(status=429, headers=limits, error={"type": "error", "error": {
        "type": "rate_limit_error", "message": "slow down"}})
    with serve_anthropic([limited, limited]) as up:
        proxy = start_one_proxy(up.base_url, upstream_format="anthropic")
        sdk = anthropic.Anthropic(base_url=proxy.root, api_key="none", max_retries=0)
        with pytest.raises(anthropic.RateLimitError) as caught:
            sdk.messages.create(model="claude-scripted", max_tokens=5,
                                messages=[{"role": "user", "content": "hi"}])
        chat = openai.OpenAI(base_url=proxy.base_url, api_key="none", max_retries=0)
        with pytest.raises(openai.RateLimitError) as chat_caught:
            chat.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    for error in (caught.value, chat_caught.value):
        assert {k: error.response.headers.get(k) for k in limits} == limits


@pytest.mark.parametrize(("choice", "parallel", "sent"), [
    ("required", None, {"type": "any"}),
    ({"type": "function", "function": {"name": "read"}}, None, {"type": "tool", "name": "read"}),
    ("none", None, {"type": "none"}),
    ("auto", False, {"type": "auto", "disable_parallel_tool_use": True}),
    (None, False, {"type": "auto", "disable_parallel_tool_use": True}),
    (None, None, None)])
def test_a_chat_clients_tool_choice_reaches_an_anthropic_upstream(
        start_one_proxy: ProxyFactory, choice: Any, parallel: Any, sent: Any) -> None:
    """With ``upstream_format = "anthropic"`` a chat client's ``tool_choice`` and
    ``parallel_tool_calls`` were dropped: a client that required a tool, or named one, got the
    model's own choice."""
    import openai

    from refold.testing import serve_anthropic

    tool = {"type": "function", "function": {"name": "read", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}}}}}
    extra: dict[str, Any] = {}
    if choice is not None:
        extra["tool_choice"] = choice
    if parallel is not None:
        extra["parallel_tool_calls"] = parallel
    with serve_anthropic(["Fine."]) as up:
        proxy = start_one_proxy(up.base_url, upstream_format="anthropic")
        chat = openai.OpenAI(base_url=proxy.base_url, api_key="none", max_retries=0)
        chat.chat.completions.create(model="claude-scripted", tools=[tool],  # type: ignore[list-item]
                                     messages=[{"role": "user", "content": "read a.py"}], **extra)
    assert up.llm.requests[0].get("tool_choice") == sent
