"""``/v1/responses``: ``instructions`` is a string or null (OpenAI's ``instructions:
Optional[str]``); anything else is a 400 in the endpoint's (OpenAI's) error shape.

It was sent upstream as Python's ``repr()``: ``instructions=["Be terse."]`` became the system
message ``"['Be terse.']"``, an object, a number or a boolean likewise, all answered 200 — a
message the client never sent. Nothing of such a request reaches the upstream or the ledger.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

from refold.testing import serve

ProxyFactory = Callable[..., Any]
MODEL = "scripted-model"


@pytest.mark.parametrize(("instructions", "kind"), [
    (["Be terse."], "an array"),
    ([{"role": "developer", "content": "Be terse."}], "an array"),
    ({"text": "Be terse."}, "an object"),
    (5, "a number"),
    (2.5, "a number"),
    (True, "a boolean"),
], ids=["strings", "items", "object", "int", "float", "bool"])
def test_instructions_that_are_not_a_string_are_a_400(
        start_one_proxy: ProxyFactory, instructions: Any, kind: str) -> None:
    with serve(["never sent"]) as up:
        proxy = start_one_proxy(up)
        for stream in (False, True):
            reply = httpx.post(proxy.base_url + "/responses", timeout=30, json={
                "model": MODEL, "input": "hi", "instructions": instructions, "stream": stream})
            assert reply.status_code == 400, reply.text
            assert reply.headers["content-type"] == "application/json"
            error = reply.json()["error"]
            assert error["type"] == "invalid_request_error" and error["code"] == "invalid_input"
            assert "'instructions' must be a string" in error["message"]
            assert kind in error["message"]
        assert up.llm.requests == []


def test_a_string_or_null_is_still_this_requests_system_prompt(
        start_proxy: ProxyFactory) -> None:
    with serve(["Oslo.", "Bergen."]) as up:
        proxy = start_proxy(up)
        client = openai.OpenAI(base_url=proxy.base_url, api_key="none", max_retries=0,
                               timeout=30)
        client.responses.create(model=MODEL, instructions="Be terse.", input="Capital?")
        raw = httpx.post(proxy.base_url + "/responses", timeout=30, json={
            "model": MODEL, "input": "Second city?", "instructions": None})
        assert raw.status_code == 200, raw.text
        with pytest.raises(openai.BadRequestError) as bad:  # the SDK sends what it is given
            client.responses.create(model=MODEL, input="hi",
                                    instructions=["Be terse."])  # type: ignore[arg-type]
        assert "'instructions' must be a string" in bad.value.message
    first, second = (r["messages"] for r in up.llm.requests)
    assert first[0] == {"role": "system", "content": "Be terse."}
    assert [m["role"] for m in second] == ["user"]
