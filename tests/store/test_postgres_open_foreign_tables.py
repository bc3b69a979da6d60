"""Another app's ``public.schema_migrations`` (Rails, golang-migrate, Ecto) is not an earlier
refold install: a new install goes to the ``refold`` schema and leaves that table alone."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from click.testing import CliRunner

from refold.cli.main import cli
from refold.errors import MigrationError, NotFound
from refold.store import open_store

pytestmark = pytest.mark.postgres

FOREIGN = {
    "rails": ("CREATE TABLE public.schema_migrations (version varchar PRIMARY KEY)",
              "INSERT INTO public.schema_migrations VALUES ('20240101120000')"),
    "golang-migrate": ("CREATE TABLE public.schema_migrations "
                       "(version bigint PRIMARY KEY, dirty boolean NOT NULL)",
                       "INSERT INTO public.schema_migrations VALUES (20240101120000, false)"),
    "ecto": ("CREATE TABLE public.schema_migrations "
             "(version bigint PRIMARY KEY, inserted_at timestamp(0))",
             "INSERT INTO public.schema_migrations VALUES (20240101120000, now())"),
}


@pytest.fixture
def fresh_db(postgres_url: str) -> Iterator[str]:
    name = f"t_db_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlunsplit(urlsplit(postgres_url)._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _foreign(url: str, app: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in FOREIGN[app]:
            conn.execute(statement)


def _public_tables(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        return {r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}


@pytest.mark.parametrize("app", sorted(FOREIGN))
def test_a_new_install_beside_another_apps_migrations_goes_to_the_refold_schema(
        fresh_db: str, app: str) -> None:
    _foreign(fresh_db, app)
    store = open_store(fresh_db)
    try:
        assert store.info()["schema"] == "refold"
        store.create_session(title="mine")
    finally:
        store.close()
    again = open_store(fresh_db, create=False)
    try:
        assert again.info()["schema"] == "refold"
        assert [s.title for s in again.list_sessions()] == ["mine"]
    finally:
        again.close()
    assert _public_tables(fresh_db) == {"schema_migrations"}
    with psycopg.connect(fresh_db) as conn:
        assert conn.execute("SELECT count(*) FROM public.schema_migrations").fetchone() == (1,)


@pytest.mark.parametrize("app", sorted(FOREIGN))
def test_a_read_command_beside_another_apps_migrations_finds_no_refold_data(
        fresh_db: str, app: str, tmp_path: Path) -> None:
    _foreign(fresh_db, app)
    result = CliRunner().invoke(cli, ["--home", str(tmp_path), "--db", fresh_db,
                                      "sessions", "list"])
    assert isinstance(result.exception, NotFound), (result.output, result.exception)
    assert "'refold'" in str(result.exception)


def test_naming_public_with_another_apps_migrations_is_a_clear_error(fresh_db: str) -> None:
    _foreign(fresh_db, "rails")
    with pytest.raises(MigrationError, match="not refold's"):
        open_store(f"{fresh_db}?schema=public")
    with pytest.raises(NotFound):
        open_store(f"{fresh_db}?schema=public", create=False)
    assert _public_tables(fresh_db) == {"schema_migrations"}


def test_an_earlier_refold_install_in_public_is_still_found(fresh_db: str) -> None:
    from refold.store.postgres import PostgresStore

    old = PostgresStore(fresh_db, schema="public")
    old.create_session(title="from before")
    old.close()
    store = open_store(fresh_db, create=False)
    try:
        assert store.info()["schema"] == "public"
        assert [s.title for s in store.list_sessions()] == ["from before"]
    finally:
        store.close()
