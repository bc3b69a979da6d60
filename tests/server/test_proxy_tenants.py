"""Client keys: authentication, and isolation of sessions, search and memory between keys."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

from refold.assembly import tenant_memory_dir
from refold.config import Settings
from refold.memory import open_file_store
from refold.memory.db import DBMemoryStore
from refold.server.auth import owner_for_key
from refold.store import Store
from refold.testing import serve

ProxyFactory = Callable[..., Any]
KEYS = ["key-alpha-123", "key-beta-456"]


def post(proxy: Any, key: str | None, text: str, session: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    if session:
        headers["X-Refold-Session"] = session
    return httpx.post(proxy.base_url + "/chat/completions", headers=headers, json={
        "model": "m", "messages": [{"role": "user", "content": text}]})


def get(proxy: Any, key: str, path: str, **params: Any) -> httpx.Response:
    return httpx.get(proxy.base_url + "/refold" + path, params=params,
                     headers={"Authorization": f"Bearer {key}"})


def test_requests_without_a_valid_key_are_refused(start_proxy: ProxyFactory) -> None:
    with serve([]) as up:
        proxy = start_proxy(up, api_keys=KEYS)
        for key in (None, "wrong-key"):
            response = post(proxy, key, "hi")
            assert response.status_code == 401
            assert response.json()["error"]["code"] == "invalid_api_key"
        assert httpx.get(proxy.base_url + "/models").status_code == 401
        assert httpx.get(proxy.base_url + "/refold/sessions").status_code == 401
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=proxy.base_url, api_key="nope", max_retries=0).models.list()
        assert up.llm.requests == []


def test_client_key_is_not_forwarded_upstream(start_proxy: ProxyFactory) -> None:
    with serve(["ok"]) as up:
        proxy = start_proxy(up, api_keys=KEYS, upstream_api_key="upstream-secret")
        assert post(proxy, KEYS[0], "hi").status_code == 200
    assert up.llm.headers[0]["authorization"] == "Bearer upstream-secret"


def test_keys_never_see_each_others_sessions_search_or_memory(
        start_proxy: ProxyFactory, sqlite_store: Store, tmp_path: Any) -> None:
    alpha, beta = KEYS
    settings = Settings(home=tmp_path / "home")
    alpha_memory = open_file_store(tenant_memory_dir(settings, owner_for_key(alpha)))
    alpha_memory.add("user", "Prefers tabs over spaces.")
    with serve(default=lambda body: "noted") as up:
        proxy = start_proxy(up, api_keys=KEYS)
        a = post(proxy, alpha, "the launch code is zebra-7", session="shared-name")
        b = post(proxy, beta, "my cat is called Miso", session="shared-name")
        assert a.status_code == b.status_code == 200
        a_id, b_id = a.headers["x-refold-session"], b.headers["x-refold-session"]
        assert a_id != b_id  # same name, two tenants, two sessions

        a_list = get(proxy, alpha, "/sessions").json()["data"]
        b_list = get(proxy, beta, "/sessions").json()["data"]
        assert [s["id"] for s in a_list] == [a_id] and [s["id"] for s in b_list] == [b_id]

        assert get(proxy, beta, f"/sessions/{a_id}").status_code == 404
        assert get(proxy, beta, f"/sessions/{a_id[:8]}").status_code == 404
        mine = get(proxy, alpha, f"/sessions/{a_id}").json()
        assert [m["message"]["content"] for m in mine["messages"]] == \
            ["the launch code is zebra-7", "noted"]

        assert get(proxy, beta, "/search", q="zebra").json()["data"] == []
        hits = get(proxy, alpha, "/search", q="zebra").json()["data"]
        assert [h["session_id"] for h in hits] == [a_id]

        # beta naming alpha's session id gets its own session, not alpha's
        c = post(proxy, beta, "what is the launch code?", session=a_id)
        assert c.headers["x-refold-session"] != a_id
        assert len(sqlite_store.get_messages(a_id)) == 2

        a_mem = get(proxy, alpha, "/memory").json()["targets"]["user"]["entries"]
        b_mem = get(proxy, beta, "/memory").json()["targets"]["user"]["entries"]
        assert [e["text"] for e in a_mem] == ["Prefers tabs over spaces."] and b_mem == []
        system_of = {r["messages"][-1]["content"]: str(r["messages"][0]["content"])
                     for r in up.llm.requests}
    # the frozen memory snapshot reached alpha's model calls only
    assert "tabs over spaces" in system_of["the launch code is zebra-7"]
    assert "tabs over spaces" not in system_of["my cat is called Miso"]
    owners = {s.owner for s in sqlite_store.list_sessions()}
    assert owners == {owner_for_key(alpha), owner_for_key(beta)}
    assert all(k not in o for o in owners for k in KEYS)  # the raw key is never stored


def test_db_memory_backend_keeps_one_profile_per_key(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    alpha, beta = KEYS
    DBMemoryStore(sqlite_store, f"default:{owner_for_key(alpha)}").add("user", "Likes green tea.")
    with serve(default=lambda body: "ok") as up:
        proxy = start_proxy(up, api_keys=KEYS, memory_backend="db")
        post(proxy, alpha, "alpha here")
        post(proxy, beta, "beta here")
        a_mem = get(proxy, alpha, "/memory").json()["targets"]["user"]["entries"]
        b_mem = get(proxy, beta, "/memory").json()["targets"]["user"]["entries"]
        systems = {r["messages"][-1]["content"]: str(r["messages"][0]["content"])
                   for r in up.llm.requests}
    assert [e["text"] for e in a_mem] == ["Likes green tea."] and b_mem == []
    assert "green tea" in systems["alpha here"] and "green tea" not in systems["beta here"]


def test_read_endpoints_validate_their_input(start_proxy: ProxyFactory) -> None:
    with serve([]) as up:
        proxy = start_proxy(up, api_keys=KEYS)
        assert get(proxy, KEYS[0], "/search").status_code == 400
        assert get(proxy, KEYS[0], "/search", q="x", limit="lots").status_code == 400
        assert get(proxy, KEYS[0], "/sessions", limit="0").status_code == 400
        assert get(proxy, KEYS[0], "/sessions/does-not-exist").status_code == 404
