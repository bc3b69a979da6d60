"""References through the proxy: ``@session`` within the caller's own sessions, local kinds
off unless ``allow_local_refs`` names a directory, every refusal in ``X-Refold-Warnings``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import openai

from refold.testing import serve

ProxyFactory = Callable[..., Any]
KEYS = ["key-alpha-123", "key-beta-456"]


def ask(proxy: Any, key: str, text: str, session: str) -> Any:
    client = openai.OpenAI(base_url=proxy.base_url, api_key=key, max_retries=0)
    return client.chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": text}],
        extra_headers={"X-Refold-Session": session})


def warnings_of(raw: Any) -> list[str]:
    header = raw.headers.get("x-refold-warnings") or ""
    return [unquote(w) for w in header.split("; ") if w]


def test_session_references_stay_within_the_tenant(start_proxy: ProxyFactory) -> None:
    alpha, beta = KEYS
    with serve(default=lambda body: "ok") as up:
        proxy = start_proxy(up, api_keys=KEYS)
        ask(proxy, alpha, "the vault code is 4711", "alpha-notes")
        stolen = ask(proxy, beta, "what did @session:alpha-notes say?", "beta-chat")
        mine = ask(proxy, alpha, "what did @session:alpha-notes say?", "alpha-followup")
    sent_beta = up.llm.requests[1]["messages"][-1]["content"]
    sent_alpha = up.llm.requests[2]["messages"][-1]["content"]
    assert "4711" not in sent_beta and sent_beta == "what did @session:alpha-notes say?"
    assert any("unknown session" in w for w in warnings_of(stolen))
    assert "4711" in sent_alpha and warnings_of(mine) == []


def test_local_references_are_off_by_default(start_proxy: ProxyFactory, tmp_path: Path) -> None:
    (tmp_path / "server-secret.txt").write_text("root password hunter2")
    with serve(["ok"]) as up:
        proxy = start_proxy(up)
        raw = ask(proxy, "k", f"@file:{tmp_path}/server-secret.txt @diff", "s")
    assert raw.parse().choices[0].message.content == "ok"
    sent = up.llm.requests[0]["messages"][-1]["content"]
    assert "hunter2" not in sent
    found = warnings_of(raw)
    assert len(found) == 2 and all("local references are off" in w for w in found)


def test_allow_local_refs_reads_only_that_directory(start_proxy: ProxyFactory,
                                                   tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "spec.md").write_text("the API returns cents")
    (tmp_path / "private.txt").write_text("hunter2")
    first = {"role": "user", "content": "see @file:spec.md and @file:../private.txt"}
    with serve(["ok", "fine"]) as up:
        proxy = start_proxy(up, allow_local_refs=shared)
        client = openai.OpenAI(base_url=proxy.base_url, api_key="k", max_retries=0)
        raw = client.chat.completions.with_raw_response.create(
            model="m", messages=[first], extra_headers={"X-Refold-Session": "s"})
        (shared / "spec.md").write_text("changed: the API returns euros")
        history = [first, {"role": "assistant", "content": "ok"},
                   {"role": "user", "content": "and then?"}]
        nxt = client.chat.completions.with_raw_response.create(
            model="m", messages=history, extra_headers={"X-Refold-Session": "s"})
    sent = up.llm.requests[0]["messages"][-1]["content"]
    assert "the API returns cents" in sent and "hunter2" not in sent
    assert [w.split(":", 2)[1] for w in warnings_of(raw)] == ["../private.txt"]
    # the next turn re-sends the same bytes for the first message (what the model read)
    assert up.llm.requests[1]["messages"][0]["content"] == sent
    assert warnings_of(nxt) == []
