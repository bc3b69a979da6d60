"""What ``/v1/messages`` and ``/v1/responses`` send upstream is valid, or the request is a 400
in the provider's shape before anything is stored or sent.

- Orphan tool results (a ``tool_result`` block, a ``function_call_output`` item, a ``role: tool``
  message whose call is in no earlier assistant message of the request) are dropped from what
  goes upstream on every endpoint; a request holding nothing else (but system messages) has
  nothing left to send and is a 400 — before, the client's orphan results went upstream as they
  were (a real provider answers 400) and the ledger kept them under a new session.
- ``stream`` must be a boolean (``"yes"`` or ``1`` started a stream), ``temperature`` a number,
  ``max_tokens`` / ``max_output_tokens`` a positive integer, a Responses function tool needs a
  name, a text block or an ``input_text`` part its text string: each went upstream as it was.
- A lone surrogate becomes U+FFFD, as on ``/v1/chat/completions`` (README, "Messages").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from refold.store import Store
from refold.testing import serve

ProxyFactory = Callable[..., Any]
USER = {"role": "user", "content": "hi"}


def _post(proxy: Any, path: str, body: Any) -> httpx.Response:
    return httpx.post(proxy.root + path, json=body, timeout=30)


def _error_of(path: str, reply: httpx.Response) -> dict[str, Any]:
    body = reply.json()
    if path == "/v1/messages":
        assert body["type"] == "error", body
    else:
        assert set(body) == {"error"}, body
    return dict(body["error"])


ONLY_ORPHANS = [
    ("/v1/messages", {"model": "m", "max_tokens": 5, "messages": [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_nope",
                                      "content": "r"}]}]}),
    ("/v1/messages", {"model": "m", "max_tokens": 5, "system": "be brief", "messages": [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_nope",
                                      "content": "r"}]}]}),
    ("/v1/responses", {"model": "m", "input": [
        {"type": "function_call_output", "call_id": "call_nope", "output": "x"}]}),
    ("/v1/responses", {"model": "m", "instructions": "be brief", "input": [
        {"type": "function_call_output", "call_id": "call_nope", "output": "x"}]}),
    ("/v1/chat/completions", {"model": "m", "messages": [
        {"role": "tool", "tool_call_id": "call_nope", "content": "r"}]}),
    ("/v1/chat/completions", {"model": "m", "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "tool", "tool_call_id": "call_nope", "content": "r"}]}),
]


@pytest.mark.parametrize(("path", "body"), ONLY_ORPHANS,
                         ids=[f"{p}-{i}" for i, (p, _) in enumerate(ONLY_ORPHANS)])
def test_a_request_of_orphan_results_only_is_a_400_and_nothing_goes_upstream(
        start_proxy: ProxyFactory, sqlite_store: Store, path: str, body: Any) -> None:
    with serve(["ok"]) as up:
        proxy = start_proxy(up)
        reply = _post(proxy, path, body)
        assert reply.status_code == 400, reply.text
        assert "no message to send" in _error_of(path, reply)["message"]
        assert up.llm.requests == []
    assert sqlite_store.list_sessions() == []  # a refused request creates no session


WITH_ORPHANS = [
    ("/v1/messages", {"model": "m", "max_tokens": 5, "messages": [
        USER, {"role": "assistant", "content": "yo"},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_nope",
                                      "content": "r"}, {"type": "text", "text": "go on"}]}]}),
    ("/v1/responses", {"model": "m", "input": [
        {"type": "function_call_output", "call_id": "call_nope", "output": "x"},
        {"type": "message", "role": "user", "content": "hi"}]}),
    ("/v1/chat/completions", {"model": "m", "messages": [
        USER, {"role": "tool", "tool_call_id": "call_nope", "content": "r"}]}),
]


@pytest.mark.parametrize(("path", "body"), WITH_ORPHANS,
                         ids=[p for p, _ in WITH_ORPHANS])
def test_orphan_results_beside_other_messages_are_dropped_from_the_upstream_request(
        start_proxy: ProxyFactory, path: str, body: Any) -> None:
    with serve(["ok"]) as up:
        proxy = start_proxy(up)
        reply = _post(proxy, path, body)
        assert reply.status_code == 200, reply.text
        sent = up.llm.requests[0]["messages"]
    assert all(m["role"] != "tool" for m in sent), sent
    assert "orphan" in reply.headers.get("x-refold-warnings", "")


BAD_FIELDS = [
    ("/v1/messages", {"stream": "yes"}, "stream"),
    ("/v1/messages", {"stream": 1}, "stream"),
    ("/v1/messages", {"temperature": "hot"}, "temperature"),
    ("/v1/messages", {"max_tokens": -5}, "max_tokens"),
    ("/v1/messages", {"max_tokens": 0}, "max_tokens"),
    ("/v1/messages", {"messages": [{"role": "user", "content": [{"type": "text"}]}]}, "text"),
    ("/v1/messages", {"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]},
     "text"),
    ("/v1/messages", {"system": [{"type": "text"}]}, "text"),
    ("/v1/responses", {"stream": "yes"}, "stream"),
    ("/v1/responses", {"stream": 1}, "stream"),
    ("/v1/responses", {"temperature": "hot"}, "temperature"),
    ("/v1/responses", {"max_output_tokens": "5"}, "max_output_tokens"),
    ("/v1/responses", {"max_output_tokens": 0}, "max_output_tokens"),
    ("/v1/responses", {"tools": [{"type": "function"}]}, "name"),
    ("/v1/responses", {"tools": [{"type": "namespace", "name": "mcp__x",
                                  "tools": [{"type": "function", "name": ""}]}]}, "name"),
    ("/v1/responses", {"input": [{"role": "user", "content": [{"type": "input_text"}]}]},
     "input_text"),
]


@pytest.mark.parametrize(("path", "fields", "named"), BAD_FIELDS,
                         ids=[f"{p}-{i}" for i, (p, _, _) in enumerate(BAD_FIELDS)])
def test_malformed_fields_are_a_400_in_the_endpoints_shape(
        start_one_proxy: ProxyFactory, path: str, fields: dict[str, Any], named: str) -> None:
    base: dict[str, Any] = ({"model": "m", "max_tokens": 5, "messages": [USER]}
                            if path == "/v1/messages" else {"model": "m", "input": "hi"})
    with serve(["ok"]) as up:
        proxy = start_one_proxy(up)
        reply = _post(proxy, path, {**base, **fields})
        assert reply.status_code == 400, reply.text[:300]
        error = _error_of(path, reply)
        assert error["type"] == "invalid_request_error"
        assert named in error["message"]
        assert up.llm.requests == []


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/responses"])
def test_well_formed_fields_still_pass(start_one_proxy: ProxyFactory, path: str) -> None:
    if path == "/v1/messages":
        body: dict[str, Any] = {
            "model": "m", "max_tokens": 1, "stream": False, "temperature": 0, "top_p": 0.5,
            "system": [{"type": "text", "text": "s"}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}
    else:
        body = {"model": "m", "stream": False, "temperature": 1.5, "max_output_tokens": 16,
                "tools": [{"type": "function", "name": "f", "parameters": {}}],
                "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}]}
    with serve(["ok"]) as up:
        proxy = start_one_proxy(up)
        assert _post(proxy, path, body).status_code == 200


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/responses", "/v1/chat/completions"])
def test_a_lone_surrogate_becomes_the_replacement_character_on_every_endpoint(
        start_one_proxy: ProxyFactory, path: str) -> None:
    raw = {"/v1/messages": b'{"model":"m","max_tokens":5,"messages":[{"role":"user",'
                           b'"content":"\\ud800 x"}]}',
           "/v1/responses": b'{"model":"m","input":"\\udc00 x"}',
           "/v1/chat/completions": b'{"model":"m","messages":[{"role":"user",'
                                   b'"content":"\\ud800 x"}]}'}[path]
    with serve(["ok"]) as up:
        proxy = start_one_proxy(up)
        reply = httpx.post(proxy.root + path, content=raw, timeout=30,
                           headers={"content-type": "application/json"})
        assert reply.status_code == 200, reply.text
        sent = up.llm.requests[0]["messages"]
    assert sent[-1]["content"] == "\ufffd x", sent
