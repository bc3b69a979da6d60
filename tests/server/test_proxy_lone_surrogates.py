"""Lone surrogates anywhere a client or an upstream can put them: an upstream reply that cut an
emoji's surrogate pair (escaped alone in JSON, or split across two streamed chunks), a client's
``model`` or tool description. Each used to end the turn in a 500, a stream cut without an
error event, or a reply the upstream was paid for and the ledger never stored; and after any
500 the server closed the client's keep-alive connection under its next request. Now a lone
surrogate becomes U+FFFD (a split pair is joined), as in a client's own message text, and a
500 leaves the connection open."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from refold.store.sqlite import SQLiteStore
from refold.testing import ScriptedReply, serve

ProxyFactory = Callable[..., Any]


def _stored(home: Path) -> list[tuple[str, str]]:
    store = SQLiteStore(str(home / "refold.db"))
    try:
        return [(m.role, str(m.message.get("content"))) for s in store.list_sessions()
                for m in store.get_messages(s.id)]
    finally:
        store.close()


def _post(client: httpx.Client, url: str, body: bytes) -> httpx.Response:
    return client.post(url + "/chat/completions", content=body,
                       headers={"content-type": "application/json"})


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_an_upstream_reply_with_a_cut_surrogate_pair_is_answered_and_stored(
        start_one_proxy: ProxyFactory, tmp_path: Path, stream: bool) -> None:
    # an emoji's pair falls across the scripted stream's 16-character chunks, each escaped
    # alone; the JSON reply carries it the same way, plus one lone half
    text = "x" * 15 + "\ud83d\ude00 then \ud800 alone"
    with serve([ScriptedReply(content=text)]) as up, httpx.Client(timeout=10) as client:
        proxy = start_one_proxy(up)
        body = b'{"model":"m","stream":%s,"messages":[{"role":"user","content":"hi"}]}' % (
            b"true" if stream else b"false")
        reply = _post(client, proxy.base_url, body)
        assert reply.status_code == 200, reply.text
        if stream:
            assert reply.text.rstrip().endswith("data: [DONE]")
        else:
            assert reply.json()["choices"][0]["message"]["content"] == \
                "x" * 15 + "\U0001f600 then \ufffd alone"
    assert _stored(tmp_path) == [("user", "hi"),
                                 ("assistant", "x" * 15 + "\U0001f600 then \ufffd alone")]


@pytest.mark.parametrize("field", [b'"model":"m\\ud800"',
                                   b'"model":"m","tools":[{"type":"function","function":{'
                                   b'"name":"f","description":"d\\udfff","parameters":{}}}]'])
def test_a_lone_surrogate_in_a_clients_model_or_tools_is_repaired(
        start_one_proxy: ProxyFactory, tmp_path: Path, field: bytes) -> None:
    with serve() as up, httpx.Client(timeout=10) as client:
        proxy = start_one_proxy(up)
        reply = _post(client, proxy.base_url,
                      b'{%s,"messages":[{"role":"user","content":"hi"}]}' % field)
        assert reply.status_code == 200, reply.text
        sent = up.llm.requests[-1]
        assert "\ufffd" in str(sent.get("model")) + str(sent.get("tools"))
    assert _stored(tmp_path) == [("user", "hi"), ("assistant", "ok")]


def test_a_500_leaves_the_keep_alive_connection_open(
        start_one_proxy: ProxyFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """An internal error answers 500 and the same client connection serves the next request
    (raised on to the server, the error made it close the connection, and the client's next
    request on it failed with "Server disconnected")."""
    from refold.server import completions

    calls = {"n": 0}
    real = completions.check_body

    def flaky(body: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("a bug")
        return real(body)

    monkeypatch.setattr(completions, "check_body", flaky)
    with serve() as up, httpx.Client(timeout=10) as client:
        proxy = start_one_proxy(up)
        body = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'
        first = _post(client, proxy.base_url, body)
        assert first.status_code == 500
        assert first.json()["error"]["code"] == "internal_error"
        assert first.headers.get("connection", "").lower() != "close"
        second = _post(client, proxy.base_url, body)  # the same pooled connection
        assert second.status_code == 200
