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
