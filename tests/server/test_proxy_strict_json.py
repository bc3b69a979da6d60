"""Request bodies are strict JSON: ``NaN`` and ``Infinity`` (which Python's json module
accepts) are a 400 instead of going upstream as invalid JSON, on every endpoint that parses a
body; and ``stream`` must be a boolean (or null), not a truthy string answered as SSE."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from refold.errors import InvalidInput
from refold.server.completions import INLINE_JSON_BYTES, check_body, parse_json
from refold.testing import ScriptedReply, serve

ProxyFactory = Callable[..., Any]
MESSAGES = '[{"role": "user", "content": "x"}]'


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
@pytest.mark.parametrize("padding", [0, INLINE_JSON_BYTES], ids=["inline", "thread"])
def test_non_json_constants_are_invalid_input(constant: str, padding: int) -> None:
    raw = f'{{"messages": {MESSAGES}, "temperature": {constant}, "x": "{"p" * padding}"}}'
    with pytest.raises(InvalidInput, match=f"not valid JSON.*{constant}"):
        asyncio.run(parse_json(raw.encode()))


@pytest.mark.parametrize("stream", ["yes", 1, 0, [], {}])
def test_a_stream_that_is_not_a_boolean_is_invalid_input(stream: Any) -> None:
    body = {"messages": [{"role": "user", "content": "x"}], "stream": stream}
    with pytest.raises(InvalidInput, match="'stream' must be true or false"):
        check_body(body)


@pytest.mark.parametrize("stream", [True, False, None])
def test_a_boolean_or_null_stream_passes(stream: Any) -> None:
    body = {"messages": [{"role": "user", "content": "x"}], "stream": stream}
    assert check_body(body) == body["messages"]


def test_the_proxy_refuses_them_and_sends_nothing_upstream(
        start_one_proxy: ProxyFactory) -> None:
    with serve(default=lambda body: ScriptedReply(content="ok")) as up:
        proxy = start_one_proxy(up)

        def post(path: str, raw: str) -> httpx.Response:
            return httpx.post(proxy.base_url + path, content=raw.encode(), timeout=30,
                              headers={"content-type": "application/json"})

        nan = post("/chat/completions",
                   f'{{"model": "m", "messages": {MESSAGES}, "temperature": NaN}}')
        yes = post("/chat/completions", f'{{"model": "m", "messages": {MESSAGES}, '
                                        '"stream": "yes"}')
        anthropic = post("/messages", f'{{"model": "m", "max_tokens": 9, "messages": {MESSAGES},'
                                      ' "top_p": Infinity}')
        null = post("/chat/completions", f'{{"model": "m", "messages": {MESSAGES}, '
                                         '"stream": null}')
    assert [r.status_code for r in (nan, yes, anthropic)] == [400] * 3
    assert "NaN" in nan.text and "'stream' must be true or false" in yes.text
    assert "Infinity" in anthropic.text
    assert null.status_code == 200 and null.json()["choices"][0]["message"]["content"] == "ok"
    assert len(up.llm.requests) == 1
