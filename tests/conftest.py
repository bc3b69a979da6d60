"""Shared fixtures: real stores (SQLite in a temp dir, PostgreSQL in a fresh schema).

PostgreSQL tests run against ``REFOLD_TEST_POSTGRES_URL`` (default
``postgresql://127.0.0.1:5432/test``). Where no server answers they skip with the reason, except
when ``REFOLD_REQUIRE_POSTGRES=1`` (CI sets it): then they fail, so CI never skips them silently.
"""

from __future__ import annotations

import importlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from refold.store import Store

# The CLI lays its tables and lines out for the terminal COLUMNS names, and wide when piped
# with no COLUMNS. pytest-xdist's workers inherit COLUMNS=80 and LINES=24 from execnet, so the
# same test would see a terminal in one run and a pipe in another: tests that want a width set
# it themselves (monkeypatch.setenv).
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)

POSTGRES_URL = os.environ.get("REFOLD_TEST_POSTGRES_URL", "postgresql://127.0.0.1:5432/test")
REQUIRE_POSTGRES = os.environ.get("REFOLD_REQUIRE_POSTGRES") == "1"
# CI sets it too: the C scorer (refold._scorer) must have been built by the install there
REQUIRE_NATIVE = os.environ.get("REFOLD_REQUIRE_NATIVE") == "1"


def postgres_unavailable_reason() -> str | None:
    """None when PostgreSQL is reachable, else why not."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed (pip install 'refold[postgres]')"
    try:
        with psycopg.connect(POSTGRES_URL, connect_timeout=3):
            return None
    except Exception as exc:  # any connection failure means: no server here
        return f"no PostgreSQL at {POSTGRES_URL}: {exc.__class__.__name__}"


_PG_REASON: str | bool | None = False  # False: not probed yet


def require_postgres() -> None:
    global _PG_REASON
    if _PG_REASON is False:
        _PG_REASON = postgres_unavailable_reason()
    if _PG_REASON:
        if REQUIRE_POSTGRES:
            pytest.fail(f"REFOLD_REQUIRE_POSTGRES=1 but {_PG_REASON}")
        pytest.skip(str(_PG_REASON))


def make_postgres_store() -> Store:
    from refold.store.postgres import PostgresStore

    return PostgresStore(POSTGRES_URL, schema=f"t_{uuid.uuid4().hex[:12]}")


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[Store]:
    from refold.store.sqlite import SQLiteStore

    store = SQLiteStore(str(tmp_path / "refold.db"))
    yield store
    store.close()


@pytest.fixture
def postgres_url() -> str:
    """The test server's URL; skips (or fails in CI) like ``postgres_store`` without a server.

    A fixture rather than an import: ``from conftest import …`` is ambiguous once a test
    directory has its own conftest.py.
    """
    require_postgres()
    return POSTGRES_URL


@pytest.fixture
def postgres_store() -> Iterator[Store]:
    require_postgres()
    store = make_postgres_store()
    yield store
    store.drop_schema()  # type: ignore[attr-defined]
    store.close()


def _require_native(module: str, what: str) -> None:
    """``module`` is built: skips with the reason where the install had no C compiler,
    fails instead under ``REFOLD_REQUIRE_NATIVE=1`` (CI)."""
    try:
        importlib.import_module(module)
    except ImportError as exc:
        reason = f"{what} was not built at install (no C compiler?): {exc}"
        if REQUIRE_NATIVE:
            pytest.fail(f"REFOLD_REQUIRE_NATIVE=1 but {reason}")
        pytest.skip(reason)


@pytest.fixture
def native_scorer() -> None:
    """The C scorer (``refold._scorer``) is built."""
    _require_native("refold._scorer", "the C scorer")


@pytest.fixture
def native_btree() -> None:
    """The C b-tree page reader (``refold._btree``) is built."""
    _require_native("refold._btree", "the C page reader")


@pytest.fixture
def cjklen_reader() -> None:
    """The C reader of packed CJK lengths (``refold._cjklen``) is built."""
    _require_native("refold._cjklen", "the C lengths reader")


@pytest.fixture
def native_jsonscan() -> None:
    """The C request-body scanner (``refold._jsonscan``) is built."""
    _require_native("refold._jsonscan", "the C request-body scanner")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest) -> Store:
    """Every conformance test runs once per backend."""
    return request.getfixturevalue(f"{request.param}_store")
