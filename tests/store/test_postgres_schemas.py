"""PostgreSQL schema naming (issue 14): new installs get a ``refold`` schema, an existing
``public`` install keeps working, and read commands never create a schema."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from click.testing import CliRunner

from refold.cli.main import cli
from refold.errors import NotFound
from refold.store import open_store

pytestmark = pytest.mark.postgres


@pytest.fixture
def fresh_db(postgres_url: str) -> Iterator[str]:
    """A URL naming a brand-new database (nothing in its public schema)."""
    name = f"t_db_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    parts = urlsplit(postgres_url)
    yield urlunsplit(parts._replace(path=f"/{name}"))
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _schemas(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        return {r[0] for r in conn.execute("SELECT nspname FROM pg_namespace")}


def _tables(url: str, schema: str) -> set[str]:
    with psycopg.connect(url) as conn:
        return {r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,))}


def test_a_new_install_lives_in_a_refold_schema(fresh_db: str) -> None:
    store = open_store(fresh_db)
    try:
        assert store.info()["schema"] == "refold"
        store.create_session(title="first")
    finally:
        store.close()
    assert "sessions" in _tables(fresh_db, "refold")
    assert "sessions" not in _tables(fresh_db, "public")
    again = open_store(fresh_db)
    try:
        assert [s.title for s in again.list_sessions()] == ["first"]
    finally:
        again.close()


def test_an_existing_public_install_keeps_working(fresh_db: str) -> None:
    from refold.store.postgres import PostgresStore

    old = PostgresStore(fresh_db, schema="public")  # as refold used to install itself
    old.create_session(title="from before")
    old.close()
    store = open_store(fresh_db)
    try:
        assert store.info()["schema"] == "public"
        assert [s.title for s in store.list_sessions()] == ["from before"]
    finally:
        store.close()
    assert "refold" not in _schemas(fresh_db)


@pytest.mark.parametrize("command", [["sessions", "list"], ["search", "deploy"],
                                     ["sessions", "show", "x"]])
def test_a_read_command_never_creates_a_schema(fresh_db: str, command: list[str],
                                               tmp_path: object) -> None:
    url = f"{fresh_db}?schema=typo_schema"
    result = CliRunner().invoke(cli, ["--home", str(tmp_path), "--db", url, *command])
    assert isinstance(result.exception, NotFound), (result.output, result.exception)
    assert "typo_schema" in str(result.exception)
    assert "typo_schema" not in _schemas(fresh_db)
    with pytest.raises(NotFound):
        open_store(url, create=False)
    assert "typo_schema" not in _schemas(fresh_db)
