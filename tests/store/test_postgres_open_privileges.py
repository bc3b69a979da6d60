"""Opening a PostgreSQL store at its version takes no DDL: the usual "the owner migrates, the
app role reads and writes" deployment works, and so does a read-only role."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from refold.errors import MigrationError, StorageError
from refold.store import open_store
from refold.store.base import SessionDraft

pytestmark = pytest.mark.postgres


def _as_role(url: str, role: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    netloc = f"{role}@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


@pytest.fixture
def deployment(postgres_url: str) -> Iterator[dict[str, str]]:
    """A new database that its owner (the test's superuser) installed refold in, with a
    read-only role and a read-write (DML) role that cannot create anything."""
    tag = uuid.uuid4().hex[:10]
    name, ro, rw, bare = f"t_db_{tag}", f"t_ro_{tag}", f"t_rw_{tag}", f"t_bare_{tag}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
        for role in (ro, rw, bare):
            conn.execute(f'CREATE ROLE "{role}" LOGIN')
    owner_url = urlunsplit(urlsplit(postgres_url)._replace(path=f"/{name}"))
    try:
        store = open_store(owner_url)
        try:
            store.sync_messages("s1", [{"role": "user", "content": "deploy the cluster"},
                                       {"role": "assistant", "content": "deployed"}],
                                create=SessionDraft(title="first"))
        finally:
            store.close()
        with psycopg.connect(owner_url, autocommit=True) as conn:
            conn.execute(f'REVOKE CREATE, TEMPORARY ON DATABASE "{name}" FROM PUBLIC')
            conn.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
            conn.execute(f'GRANT USAGE ON SCHEMA refold TO "{ro}", "{rw}"')
            conn.execute(f'GRANT SELECT ON ALL TABLES IN SCHEMA refold TO "{ro}"')
            conn.execute("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA refold "
                         f'TO "{rw}"')
            conn.execute(f'GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA refold TO "{rw}"')
        yield {"owner": owner_url, "ro": _as_role(owner_url, ro), "rw": _as_role(owner_url, rw),
               "bare": _as_role(owner_url, bare), "db": name}
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            for role in (ro, rw, bare):
                conn.execute(f'DROP ROLE IF EXISTS "{role}"')


def test_a_read_only_role_reads(deployment: dict[str, str]) -> None:
    store = open_store(deployment["ro"], create=False)
    try:
        assert [s.title for s in store.list_sessions()] == ["first"]
        assert [m.seq for m in store.get_messages("s1")] == [1, 2]
        with pytest.raises(StorageError, match="permission denied"):
            store.create_session(title="not allowed")
    finally:
        store.close()
    again = open_store(deployment["ro"])  # a write command opens with create=True
    try:
        info = again.info()
        assert info["schema_version"] == info["schema_latest"]
        assert [s.title for s in again.list_sessions()] == ["first"]
    finally:
        again.close()


def test_a_role_with_dml_reads_and_writes(deployment: dict[str, str]) -> None:
    store = open_store(deployment["rw"])
    try:
        assert store.info()["schema"] == "refold"
        store.sync_messages("s2", [{"role": "user", "content": "second session"}],
                            create=SessionDraft(title="second"))
        store.sync_messages("s1", [{"role": "user", "content": "deploy the cluster"},
                                   {"role": "assistant", "content": "deployed"},
                                   {"role": "user", "content": "thanks"}])
        assert sorted(s.title or "" for s in store.list_sessions()) == ["first", "second"]
        assert [m.seq for m in store.get_messages("s1")] == [1, 2, 3]
    finally:
        store.close()


def test_the_cli_lists_sessions_as_a_read_only_role(deployment: dict[str, str],
                                                    tmp_path: Path) -> None:
    env = {**os.environ, "REFOLD_HOME": str(tmp_path)}
    env.pop("REFOLD_DB", None)
    proc = subprocess.run([sys.executable, "-m", "refold", "--db", deployment["ro"],
                           "sessions", "list"], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "first" in proc.stdout


def test_a_role_that_cannot_create_gets_a_clear_error_on_a_new_schema(
        deployment: dict[str, str]) -> None:
    url = f"{deployment['rw']}?schema=t_new_{uuid.uuid4().hex[:8]}"
    with pytest.raises(MigrationError, match="permission denied for database") as caught:
        open_store(url)
    assert "cannot create refold's tables" in str(caught.value)


def test_an_older_schema_still_needs_a_role_that_may_migrate(deployment: dict[str, str]) -> None:
    """A schema behind this refold is migrated on open, which a DML role cannot do: the
    error says so instead of reading from a schema that is not up to date."""
    with psycopg.connect(deployment["owner"], autocommit=True) as conn:
        conn.execute("DELETE FROM refold.schema_migrations WHERE version = "
                     "(SELECT max(version) FROM refold.schema_migrations)")
    with pytest.raises(MigrationError, match="failed"):
        open_store(deployment["rw"])
    store = open_store(deployment["owner"])  # the owner migrates it again
    try:
        assert store.applied_migrations != []  # type: ignore[attr-defined]
    finally:
        store.close()
