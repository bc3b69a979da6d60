"""A request refused for an invalid message creates no session: not a derived one, and not the
one its ``X-Refold-Session`` names, which a later valid request then creates afresh."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from refold.testing import ScriptedReply, serve

ProxyFactory = Callable[..., Any]


def _post(proxy: Any, messages: list[dict[str, Any]], name: str | None = None) -> httpx.Response:
    headers = {"X-Refold-Session": name} if name else {}
    return httpx.post(proxy.base_url + "/chat/completions", timeout=30, headers=headers,
                      json={"model": "m", "messages": messages})


def test_an_invalid_message_leaves_no_session_behind(start_one_proxy: ProxyFactory) -> None:
    wizard = [{"role": "user", "content": "hello"}, {"role": "wizard", "content": "x"}]
    with serve(default=lambda body: ScriptedReply(content="ok")) as up:
        proxy = start_one_proxy(up)
        derived = _post(proxy, wizard)
        named = _post(proxy, wizard, "my-named")
        empty = httpx.get(proxy.base_url + "/refold/sessions").json()["data"]
        valid = _post(proxy, [{"role": "user", "content": "named"}], "my-named")
        listed = httpx.get(proxy.base_url + "/refold/sessions").json()["data"]
        shown = httpx.get(proxy.base_url + "/refold/sessions/my-named").json()
    assert (derived.status_code, named.status_code) == (400, 400)
    assert "unknown role 'wizard'" in named.text
    assert empty == []
    assert valid.status_code == 200, valid.text
    assert [s["title"] for s in listed] == ["my-named"]
    assert shown["id"] == valid.headers["x-refold-session"]
    assert [m["message"]["content"] for m in shown["messages"]] == ["named", "ok"]
    assert len(up.llm.requests) == 1
