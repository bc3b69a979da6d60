"""Standard libpq URLs without a host (a Unix socket, or ``?host=`` in the query) reach the
server as written; refold only takes its own ``?schema=`` out of them."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from refold.store import open_store
from refold.store.postgres.connection import split_url, with_schema


@pytest.mark.parametrize(("url", "conninfo", "schema"), [
    ("postgresql:///db", "postgresql:///db", None),
    ("postgresql:///db?schema=s1", "postgresql:///db", "s1"),
    ("postgresql:///probe?host=127.0.0.1&user=postgres",
     "postgresql:///probe?host=127.0.0.1&user=postgres", None),
    ("postgres:///db?schema=s1&host=%2Fvar%2Frun%2Fpostgresql",
     "postgres:///db?host=%2Fvar%2Frun%2Fpostgresql", "s1"),
    ("postgresql://u:p@h:5433/db?sslmode=require&schema=s1",
     "postgresql://u:p@h:5433/db?sslmode=require", "s1"),
    # passed on as written: libpq decodes %20 but not "+", so re-encoding would change it
    ("postgresql://h/db?options=-c%20statement_timeout%3D4321",
     "postgresql://h/db?options=-c%20statement_timeout%3D4321", None),
])
def test_split_url_keeps_what_libpq_reads(url: str, conninfo: str, schema: str | None) -> None:
    assert split_url(url) == (conninfo, schema)
    conninfo_to_dict(conninfo)  # libpq parses it (a mangled "postgresql:/db" raised)


def test_a_socket_url_names_its_schema_and_stays_a_url() -> None:
    url = with_schema("postgresql:///db", "refold")
    assert url == "postgresql:///db?schema=refold"
    assert split_url(url) == ("postgresql:///db", "refold")
    assert conninfo_to_dict(split_url(url)[0]) == {"dbname": "db"}
    assert with_schema("postgresql:///db?host=h&schema=x", "public") == "postgresql:///db?host=h"


def _server(postgres_url: str) -> tuple[str, int, str]:
    parts = urlsplit(postgres_url)
    return parts.hostname or "127.0.0.1", parts.port or 5432, parts.path.lstrip("/") or "test"


@pytest.mark.postgres
def test_the_host_in_the_query_reaches_the_server(postgres_url: str, tmp_path: Path) -> None:
    host, port, db = _server(postgres_url)
    schema = f"t_{uuid.uuid4().hex[:12]}"
    user = urlsplit(postgres_url).username or "postgres"
    url = f"postgresql:///{db}?host={host}&port={port}&user={user}&schema={schema}"
    store = open_store(url)
    try:
        store.create_session(title="via the query")
        assert store.url == url
        again = open_store(store.url, create=False)
        try:
            assert [s.title for s in again.list_sessions()] == ["via the query"]
        finally:
            again.close()
        env = {**os.environ, "REFOLD_HOME": str(tmp_path)}
        env.pop("REFOLD_DB", None)
        proc = subprocess.run([sys.executable, "-m", "refold", "--db", url, "sessions", "list"],
                              capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert "via the query" in proc.stdout
    finally:
        store.drop_schema()  # type: ignore[attr-defined]
        store.close()


@pytest.mark.postgres
def test_libpq_options_reach_the_server_unchanged(postgres_url: str) -> None:
    from refold.store.postgres import PostgresStore

    sep = "&" if "?" in postgres_url else "?"
    store = PostgresStore(f"{postgres_url}{sep}options=-c%20statement_timeout%3D4321",
                          schema=f"t_{uuid.uuid4().hex[:12]}")
    try:
        with store._tx("read a setting") as cur:
            cur.execute("SHOW statement_timeout")
            assert cur.fetchone() == ("4321ms",)
    finally:
        store.drop_schema()
        store.close()


@pytest.mark.postgres
def test_a_unix_socket_url_reaches_the_server(postgres_url: str) -> None:
    _, port, db = _server(postgres_url)
    user = urlsplit(postgres_url).username or "postgres"
    url = f"postgresql:///{db}?port={port}&user={user}"
    try:
        psycopg.connect(url, connect_timeout=3).close()
    except psycopg.OperationalError as exc:
        pytest.skip(f"no Unix socket of the test server here: {exc}")
    schema = f"t_{uuid.uuid4().hex[:12]}"
    store = open_store(f"{url}&schema={schema}")
    try:
        store.create_session(title="via the socket")
        assert [s.title for s in store.list_sessions()] == ["via the socket"]
    finally:
        store.drop_schema()  # type: ignore[attr-defined]
        store.close()
