"""Several runtimes on one session: each opens its own store on the same database, as
separate processes or hosts would (SQLite file, PostgreSQL schema)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from refold.store import Store
from refold.store.sqlite import SQLiteStore


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Store]]:
    """A function opening another store on one shared database (closed afterwards)."""
    opened: list[Store] = []
    if request.param == "sqlite":
        path = str(tmp_path / "shared.db")

        def open_one() -> Store:
            opened.append(SQLiteStore(path))
            return opened[-1]
    else:
        first = request.getfixturevalue("postgres_store")
        from refold.store.postgres import PostgresStore

        def open_one() -> Store:
            opened.append(PostgresStore(first.url, min_size=1, max_size=3))
            return opened[-1]
    yield open_one
    for store in opened:
        store.close()
