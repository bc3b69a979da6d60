"""Names and tenants: ownership is a column, so a tenant finds the sessions it named by those
names (read endpoints, and the operator's CLI with ``--owner``), no other tenant does, long
names are refused instead of cut, one key cannot take another's names, and titles older
versions tagged ("foo @8a197f6f") are migrated."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from click.testing import CliRunner

from refold.server.auth import owner_for_key
from refold.store import Store, open_store
from refold.testing import serve

ProxyFactory = Callable[..., Any]
ALPHA, BETA, GAMMA = "key-alpha-123", "key-beta-456", "key-gamma-789"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[ProxyFactory, Store]:
    if request.param == "sqlite":
        return request.getfixturevalue("start_one_proxy"), _store_of(request, "sqlite")
    return request.getfixturevalue("start_pg_proxy"), request.getfixturevalue("postgres_store")


def _store_of(request: pytest.FixtureRequest, kind: str) -> Store:
    # start_one_proxy opens <tmp>/refold.db; the test reads the same file
    tmp = request.getfixturevalue("tmp_path")
    store = open_store(str(tmp / "refold.db"))
    request.addfinalizer(store.close)
    return store


def _say(proxy: Any, key: str, name: str, text: str) -> str:
    client = openai.OpenAI(base_url=proxy.base_url, api_key=key, max_retries=0)
    reply = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": text}],
        extra_headers={"X-Refold-Session": name})
    return reply.choices[0].message.content or ""


def _read(proxy: Any, key: str, name: str) -> httpx.Response:
    return httpx.get(f"{proxy.base_url}/refold/sessions/{name}",
                     headers={"Authorization": f"Bearer {key}"})


def test_each_tenant_finds_its_named_session_and_no_other_does(
        backend: tuple[ProxyFactory, Store]) -> None:
    start, store = backend
    with serve(["a1", "b1"]) as up:
        proxy = start(up, api_keys=[ALPHA, BETA, GAMMA])
        assert _say(proxy, ALPHA, "foo", "alpha's secret plan") == "a1"
        assert _say(proxy, BETA, "foo", "beta's own words") == "b1"
        alpha, beta = _read(proxy, ALPHA, "foo"), _read(proxy, BETA, "foo")
        gamma = _read(proxy, GAMMA, "foo")
        listed = httpx.get(proxy.base_url + "/refold/sessions",
                           headers={"Authorization": f"Bearer {GAMMA}"}).json()["data"]
    assert alpha.status_code == 200 and beta.status_code == 200, (alpha.text, beta.text)
    a, b = alpha.json(), beta.json()
    assert a["title"] == "foo" and b["title"] == "foo" and a["id"] != b["id"]
    assert (a["owner"], b["owner"]) == (owner_for_key(ALPHA), owner_for_key(BETA))
    assert a["messages"][0]["message"]["content"] == "alpha's secret plan"
    assert "beta's own words" not in json.dumps(a) and "alpha's" not in json.dumps(b)
    assert gamma.status_code == 404 and listed == []
    # what each upstream request carried: only that tenant's messages
    assert [r["messages"][-1]["content"] for r in up.llm.requests] == [
        "alpha's secret plan", "beta's own words"]
    titles = sorted((s.owner, s.title) for s in store.list_sessions(limit=10))
    assert titles == sorted([(owner_for_key(ALPHA), "foo"), (owner_for_key(BETA), "foo")])


def test_a_second_turn_by_name_continues_the_tenants_own_session(
        backend: tuple[ProxyFactory, Store]) -> None:
    start, store = backend
    with serve(["a1", "b1", "a2"]) as up:
        proxy = start(up, api_keys=[ALPHA, BETA])
        _say(proxy, ALPHA, "shared-name", "one")
        _say(proxy, BETA, "shared-name", "other")  # B cannot take over A's name
        client = openai.OpenAI(base_url=proxy.base_url, api_key=ALPHA, max_retries=0)
        client.chat.completions.create(model="m", messages=[
            {"role": "user", "content": "one"}, {"role": "assistant", "content": "a1"},
            {"role": "user", "content": "two"}], extra_headers={"X-Refold-Session": "shared-name"})
        rows = _read(proxy, ALPHA, "shared-name").json()["messages"]
    assert [r["message"]["content"] for r in rows] == ["one", "a1", "two", "a2"]
    assert len(store.list_sessions(limit=10)) == 2


def test_long_names_are_refused_not_cut(backend: tuple[ProxyFactory, Store]) -> None:
    start, store = backend
    base = "n" * 100
    with serve(["x", "y"]) as up:
        proxy = start(up, api_keys=[ALPHA, BETA])
        client = openai.OpenAI(base_url=proxy.base_url, api_key=ALPHA, max_retries=0)
        with pytest.raises(openai.BadRequestError, match="longer than 100"):
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "x"}],
                extra_headers={"X-Refold-Session": base + "-tail"})
        assert _say(proxy, ALPHA, base, "alpha") == "x"  # exactly 100 characters is fine
        assert _say(proxy, BETA, base, "beta") == "y"
        assert _read(proxy, BETA, base).json()["messages"][0]["message"]["content"] == "beta"
    assert len(up.llm.requests) == 2
    assert sorted(s.owner for s in store.list_sessions(limit=10)) == sorted(
        [owner_for_key(ALPHA), owner_for_key(BETA)])


def test_the_operator_finds_a_tenants_session_with_owner(
        start_one_proxy: ProxyFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from refold.cli.main import cli

    with serve(["a1", "b1"]) as up:
        proxy = start_one_proxy(up, api_keys=[ALPHA, BETA])
        _say(proxy, ALPHA, "foo", "from alpha")
        _say(proxy, BETA, "foo", "from beta")
    db = str(tmp_path / "refold.db")
    monkeypatch.setenv("ALPHA_KEY", ALPHA)
    runner = CliRunner()

    def show(*args: str) -> Any:
        return runner.invoke(cli, ["--db", db, "sessions", "show", "foo", "--json", *args])

    by_env = show("--owner", "env:ALPHA_KEY")
    by_id = show("--owner", owner_for_key(BETA))
    neither = show()
    local = show("--owner", "local")
    assert by_env.exit_code == 0, by_env.output
    assert json.loads(by_env.output)["messages"][0]["message"]["content"] == "from alpha"
    assert json.loads(by_id.output)["messages"][0]["message"]["content"] == "from beta"
    assert neither.exit_code != 0 and "--owner" in str(neither.exception)
    assert local.exit_code != 0
    listed = runner.invoke(cli, ["--db", db, "sessions", "list", "--json",
                                 "--owner", owner_for_key(ALPHA)])
    assert [s["owner"] for s in json.loads(listed.output)] == [owner_for_key(ALPHA)]


# -- migration of tagged titles --------------------------------------------------------------
def _downgrade_sqlite(path: str, rows: list[tuple[str, str, str]]) -> None:
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("DROP INDEX sessions_owner_title")
        conn.execute("CREATE UNIQUE INDEX sessions_title ON sessions(title) "
                     "WHERE title IS NOT NULL")
        for sid, owner, title in rows:
            conn.execute("INSERT INTO sessions (id, title, owner, started_at) VALUES (?,?,?,0)",
                         (sid, title, owner))
        conn.execute("DELETE FROM schema_migrations WHERE version = 5")
    conn.close()


def _downgrade_pg(store: Any, rows: list[tuple[str, str, str]]) -> None:
    with store._tx("downgrade") as cur:
        cur.execute("DROP INDEX sessions_owner_title")
        cur.execute("CREATE UNIQUE INDEX sessions_title ON sessions (title) "
                    "WHERE title IS NOT NULL")
        for sid, owner, title in rows:
            cur.execute("INSERT INTO sessions (id, title, owner, started_at) "
                        "VALUES (%s, %s, %s, 0)", (sid, title, owner))
        # PostgreSQL applies the versions above the newest applied one: undo the later
        # migration (6, the lease holder's connection) too, as a real pre-5 schema lacks it
        cur.execute("ALTER TABLE leases DROP COLUMN backend_pid, DROP COLUMN backend_start")
        cur.execute("DELETE FROM schema_migrations WHERE version >= 5")


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_old_tagged_titles_are_migrated_to_the_owner_column(
        kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    alpha, beta = owner_for_key(ALPHA), owner_for_key(BETA)
    tag_a, tag_b = alpha[4:12], beta[4:12]
    rows = [("s1", alpha, f"foo @{tag_a}"), ("s2", alpha, f"foo @{tag_a} #2"),
            ("s3", beta, f"foo @{tag_b}"), ("s4", "", "plain @local"),
            ("s5", beta, f"bar @{tag_a}")]  # a tag that is not its owner's stays
    if kind == "sqlite":
        path = str(tmp_path / "old.db")
        open_store(path).close()
        _downgrade_sqlite(path, rows)
        store = open_store(path)
    else:
        pg = request.getfixturevalue("postgres_store")
        _downgrade_pg(pg, rows)
        from refold.store.postgres import PostgresStore

        store = PostgresStore(pg.url)
    try:
        titles = {s.id: s.title for s in store.list_sessions(limit=10)}
        assert titles == {"s1": "foo", "s2": "foo #2", "s3": "foo", "s4": "plain @local",
                          "s5": f"bar @{tag_a}"}
        assert store.resolve_session("foo", owner=alpha).id == "s1"  # the exact title
        assert store.resolve_session("foo #2", owner=alpha).id == "s2"
        assert store.resolve_session("foo", owner=beta).id == "s3"
    finally:
        store.close()
