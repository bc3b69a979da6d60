"""The proxy surfaces the runtime's notices as response headers, JSON and streamed alike.

A tiny context window makes compaction unable to fit the turn: the runtime warns, and the
warning must reach the client in ``X-Refold-Warnings`` (percent-encoded, "; "-joined) while the
body stays a plain OpenAI response. A history that can be compacted gives
``X-Refold-Compacted: before->after``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any
from urllib.parse import unquote

import httpx
import pytest

from refold.server.completions import _Turn
from refold.testing import serve

ProxyFactory = Callable[..., Any]

BIG = "长" * 10 + " word" * 3000  # one message far over a 1000-token window, with non-ASCII


def _post(base_url: str, messages: list[dict[str, Any]], stream: bool,
          session: str = "warned") -> httpx.Response:
    body = {"model": "m", "messages": messages, "stream": stream}
    with httpx.Client(timeout=30) as client:
        response = client.post(f"{base_url}/chat/completions", json=body,
                               headers={"X-Refold-Session": session})
        response.read()
        return response


def _warnings(response: httpx.Response) -> list[str]:
    raw = response.headers.get("x-refold-warnings")
    assert raw is not None, dict(response.headers)
    raw.encode("ascii")  # a header value a strict client can read
    return [unquote(part) for part in raw.split("; ")]


def test_a_warning_reaches_json_and_stream_clients_as_a_header(
        start_proxy: ProxyFactory) -> None:
    with serve(["first", "second"]) as up:
        proxy = start_proxy(up, context_length=1000)
        plain = _post(proxy.base_url, [{"role": "user", "content": BIG}], stream=False)
        assert plain.status_code == 200
        assert plain.json()["choices"][0]["message"]["content"] == "first"
        warned = _warnings(plain)
        assert any("1000 token window" in w for w in warned), warned
        history = [{"role": "user", "content": BIG}, {"role": "assistant", "content": "first"},
                   {"role": "user", "content": "again " + BIG}]
        streamed = _post(proxy.base_url, history, stream=True)
        assert streamed.status_code == 200
        assert streamed.text.rstrip().endswith("data: [DONE]")
        assert any("token window" in w for w in _warnings(streamed))


def _long_history(tag: str) -> list[dict[str, Any]]:
    filler = "The build log said: step N compiled module alpha beta gamma delta. " * 12
    history: list[dict[str, Any]] = [{"role": "system", "content": f"You are terse ({tag})."}]
    for i in range(30):
        history += [{"role": "user", "content": f"turn {i}: " + filler.replace("N", str(i))},
                    {"role": "assistant", "content": f"noted {i}"}]
    history.append({"role": "user", "content": "And now?"})
    return history


def test_quiet_turns_have_no_warning_header_and_a_compacting_turn_says_so(
        start_proxy: ProxyFactory) -> None:
    with serve(default=lambda _b: "ok") as up:
        proxy = start_proxy(up, context_length=8000)
        quiet = _post(proxy.base_url, [{"role": "user", "content": "hello"}], stream=False,
                      session="quiet")
        assert "x-refold-warnings" not in quiet.headers
        assert "x-refold-compacted" not in quiet.headers
        for stream in (False, True):
            response = _post(proxy.base_url, _long_history(str(stream)), stream=stream,
                             session=f"long-{stream}")
            assert response.status_code == 200
            before, after = (int(x) for x in response.headers["x-refold-compacted"].split("->"))
            assert 0 < after < before


def test_warnings_are_logged_at_info_without_message_content(
        start_proxy: ProxyFactory, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="refold.server.completions")
    with serve(["first"]) as up:
        proxy = start_proxy(up, context_length=1000)
        _post(proxy.base_url, [{"role": "user", "content": BIG}], stream=False)
    logged = [r.getMessage() for r in caplog.records
              if r.name == "refold.server.completions" and r.levelno == logging.INFO]
    assert any("token window" in line for line in logged), logged
    assert not any("word word" in line or "长" in line for line in logged)


def test_the_header_value_is_ascii_and_splits_back_into_the_warnings() -> None:
    rt = SimpleNamespace(session_id="s1", take_compaction=lambda: None)
    turn = _Turn(proxy=None, tenant=None, rt=rt, body={}, history=[])  # type: ignore[arg-type]
    blocked = "auto-compaction blocked: 2 tries saved < 10%; 摘要 100%"
    notices = [blocked, "summarizer failed\nretrying later", blocked]
    turn._note(SimpleNamespace(warnings=notices, tokens_before=900, tokens=300))
    headers = turn.headers()
    raw = headers["X-Refold-Warnings"]
    raw.encode("ascii")
    assert [unquote(part) for part in raw.split("; ")] == [
        notices[0], "summarizer failed retrying later"]  # each once, whitespace folded
    assert headers["X-Refold-Compacted"] == "900->300"
