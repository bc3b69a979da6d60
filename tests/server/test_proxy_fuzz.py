"""Any JSON body, on any of the three APIs: an answer or a 4xx, never a 500.

Fuzzing the proxy with random bodies found three 500s (a TypeError deep in the turn: ``tools``
not a list, ``model`` not a string, a Responses ``input`` that is a number), and each 500 also
closed the client's keep-alive connection. This keeps the property.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refold.testing import serve

ProxyFactory = Callable[..., Any]

_WORDS = st.sampled_from(["", "x", "user", "assistant", "tool", "system", "developer", "text",
                          "image_url", "tool_use", "tool_result", "function", "function_call",
                          "function_call_output", "message", "input_text", "call_1", "m"])
_KEYS = st.sampled_from(["role", "content", "model", "stream", "tools", "tool_calls",
                         "tool_call_id", "type", "text", "id", "function", "name", "arguments",
                         "input", "max_tokens", "system", "image_url", "url", "tool_choice",
                         "reasoning_content", "previous_response_id", "instructions", "output",
                         "call_id", "store", "source", "tool_use_id", "summary", "stream_options"])
_JSON = st.recursive(st.none() | st.booleans() | st.integers(-2, 10**20) | st.floats(
    allow_nan=False, allow_infinity=False) | _WORDS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=4),
    max_leaves=10)
_MESSAGE = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "tool", "system"]),
                                  "content": _JSON}, optional={"tool_calls": _JSON,
                                                               "tool_call_id": _JSON,
                                                               "name": _JSON})
_BODIES = st.one_of(
    st.tuples(st.just("/chat/completions"), st.fixed_dictionaries(
        {"model": st.just("m") | _JSON, "messages": st.lists(_MESSAGE, max_size=3)},
        optional={"tools": _JSON, "stream": _JSON, "tool_choice": _JSON})),
    st.tuples(st.just("/messages"), st.fixed_dictionaries(
        {"model": st.just("m"), "max_tokens": st.just(16),
         "messages": st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user",
                                                                              "assistant"]),
                                                     "content": _JSON}), max_size=3)},
        optional={"tools": _JSON, "system": _JSON, "stream": _JSON})),
    st.tuples(st.just("/responses"), st.fixed_dictionaries(
        {"model": st.just("m") | _JSON, "input": _JSON},
        optional={"tools": _JSON, "instructions": _JSON, "store": _JSON})),
)


@pytest.mark.parametrize("sqlite_store", ["NORMAL"], indirect=True)
def test_any_body_is_an_answer_or_a_4xx(start_proxy: ProxyFactory) -> None:
    with serve(default=lambda body: "ok") as up:
        proxy = start_proxy(up)
        with httpx.Client(base_url=proxy.base_url, timeout=30) as client:

            @settings(max_examples=150, deadline=None,
                      suppress_health_check=[HealthCheck.too_slow,
                                             HealthCheck.function_scoped_fixture])
            @given(case=_BODIES)
            def check(case: tuple[str, dict[str, Any]]) -> None:
                path, body = case
                response = client.post(path, json=body, headers={"x-api-key": "k"})
                assert response.status_code < 500, (path, body, response.text[:300])

            check()
