"""A fresh ``refold serve`` builds what its first request needs while it waits for it: the open
proxy's engine (the first request of a fresh serve took ~0.7 s, the tokenizer's vocabulary
alone ~0.45 s), or with client keys the tokenizer every tenant's engine shares. Nothing is stored."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import openai
import pytest

from refold.store import Store
from refold.testing import serve

ProxyFactory = Callable[..., Any]


def _wait_for(check: Callable[[], bool], seconds: float = 15.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "condition never reached"
        time.sleep(0.02)


def test_the_open_proxy_builds_its_engine_before_the_first_request(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    with serve(default=lambda _b: "ok") as up:
        proxy = start_proxy(up)
        pool = proxy.app.state.proxy_app.proxy.pool
        _wait_for(lambda: "" in pool._engines)
        engine = pool._engines[""]
        assert sqlite_store.list_sessions() == []  # built, nothing stored
        client = openai.OpenAI(base_url=proxy.base_url, api_key="none", max_retries=0)
        reply = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hello"}])
        assert reply.choices[0].message.content == "ok"
        assert pool._engines[""] is engine  # the request used the warm one, no second build
        assert len(sqlite_store.list_sessions()) == 1


def test_with_client_keys_only_the_shared_tokenizer_is_loaded(
        start_proxy: ProxyFactory, sqlite_store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    from refold.tokens import models

    monkeypatch.setattr(models, "_SHARED", {})  # the process's shared counters, none yet
    assert models.encoding_for_model("gpt-4o-mini") == "o200k_base"
    with serve(default=lambda _b: "ok") as up:
        proxy = start_proxy(up, api_keys=["k1"], model="gpt-4o-mini")
        _wait_for(lambda: "o200k_base" in models._SHARED)
        assert proxy.app.state.proxy_app.proxy.pool._engines == {}  # no tenant's engine
        assert sqlite_store.list_sessions() == []
        client = openai.OpenAI(base_url=proxy.base_url, api_key="k1", max_retries=0)
        reply = client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "hello"}])
        assert reply.choices[0].message.content == "ok"
