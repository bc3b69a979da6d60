"""Non-ASCII ``X-Refold-Session`` names: the header's bytes are UTF-8, so two names that differ
only past ASCII are two sessions, each titled exactly as the client spelled it, the 100-character
limit counts characters, and bytes that are not UTF-8 are a 400 naming the header."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import httpx

from refold.testing import ScriptedReply, serve

ProxyFactory = Callable[..., Any]


def _post(proxy: Any, name: bytes, text: str | list[dict[str, str]],
          path: str = "/chat/completions", **fields: Any) -> httpx.Response:
    messages = [{"role": "user", "content": text}] if isinstance(text, str) else text
    body = {"model": "m", "messages": messages, **fields}
    return httpx.post(proxy.base_url + path, json=body, timeout=30,
                      headers={"X-Refold-Session": name})


def _titles(proxy: Any) -> dict[str, str]:
    listed = httpx.get(proxy.base_url + "/refold/sessions").json()["data"]
    return {s["title"]: s["id"] for s in listed}


def test_utf8_names_are_distinct_sessions_titled_as_sent(start_one_proxy: ProxyFactory) -> None:
    with serve(default=lambda body: ScriptedReply(content="ok")) as up:
        proxy = start_one_proxy(up)
        party = _post(proxy, "party 🎉".encode(), "plan the party")
        other = _post(proxy, "party 🎊".encode(), "something else entirely")
        # the Messages endpoint reads the same header the same way
        japanese = _post(proxy, "日本語セッション".encode(), "こんにちは", "/messages",
                         max_tokens=64)
        again = _post(proxy, "party 🎉".encode(), [
            {"role": "user", "content": "plan the party"}, {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "invite Bob"}])
        titles = _titles(proxy)
        shown = httpx.get(proxy.base_url + "/refold/sessions/" + quote("party 🎉")).json()
    assert [r.status_code for r in (party, other, japanese)] == [200] * 3, other.text
    assert party.headers["x-refold-session"] != other.headers["x-refold-session"]
    assert again.headers["x-refold-session"] == party.headers["x-refold-session"]
    assert set(titles) == {"party 🎉", "party 🎊", "日本語セッション"}
    assert titles["party 🎉"] == party.headers["x-refold-session"]
    # the second name never rewound the first conversation: its turns are all there, active
    assert [(m["message"]["content"], m["active"]) for m in shown["messages"]] == [
        ("plan the party", True), ("ok", True), ("invite Bob", True), ("ok", True)]


def test_the_name_limit_counts_characters_and_bad_utf8_is_a_400(
        start_one_proxy: ProxyFactory) -> None:
    with serve(default=lambda body: ScriptedReply(content="ok")) as up:
        proxy = start_one_proxy(up)
        longest = _post(proxy, ("🎉" * 100).encode(), "a hundred characters")
        too_long = _post(proxy, ("🎉" * 101).encode(), "one too many")
        latin1 = _post(proxy, "café".encode("latin-1"), "not UTF-8")
        titles = _titles(proxy)
    assert longest.status_code == 200, longest.text
    assert too_long.status_code == 400 and "100 characters" in too_long.text
    assert latin1.status_code == 400, latin1.text
    assert "X-Refold-Session" in latin1.text and "UTF-8" in latin1.text
    assert list(titles) == ["🎉" * 100]
    assert len(up.llm.requests) == 1
