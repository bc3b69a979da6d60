"""A pool that cannot get a connection says why the last attempt to connect failed (a dropped
database, a refused role), not only "no free PostgreSQL connection"."""

from __future__ import annotations

import uuid
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from refold.errors import StorageError

pytestmark = pytest.mark.postgres


def test_a_dropped_database_is_named_in_the_error(postgres_url: str) -> None:
    from refold.store.postgres import PostgresStore

    name = f"t_db_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    store = None
    try:
        store = PostgresStore(urlunsplit(urlsplit(postgres_url)._replace(path=f"/{name}")),
                              timeout=2)
        store.create_session(title="before")
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        with pytest.raises(StorageError) as caught:
            store.list_sessions()
        text = str(caught.value)
        assert f'database "{name}" does not exist' in text, text
        assert "raise max_size" not in text
    finally:
        if store is not None:
            store.close()
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_a_busy_pool_still_says_no_free_connection(postgres_store: object) -> None:
    """All connections taken, none failed: the old advice stands."""
    from refold.store.postgres import PostgresStore

    url = postgres_store.url  # type: ignore[attr-defined]
    store = PostgresStore(url, max_size=1, timeout=1)
    try:
        with store._pool.connection(), pytest.raises(StorageError) as caught:
            store.list_sessions()
        assert "no free PostgreSQL connection" in str(caught.value)
        assert "raise max_size" in str(caught.value)
    finally:
        store.close()
