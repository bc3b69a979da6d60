"""Fixtures for runtime tests: an Engine over each store backend with a small window."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from refold.runtime import Engine
from refold.store import Store, open_store
from refold.store.sqlite import SQLiteStore

from ._helpers import WINDOW


@pytest.fixture
def engine(store: Store, tmp_path: Path) -> Iterator[Engine]:
    eng = Engine(store, model="gpt-4o-mini", context_length=WINDOW,
                 memory_dir=tmp_path / "memories")
    yield eng
    eng.close()


@pytest.fixture
def twin_store(tmp_path: Path) -> Iterator[Store]:
    """A second SQLite file (synchronous NORMAL): a twin runtime's, to compare paths with."""
    store = open_store(tmp_path / "twin.db", sqlite_synchronous="NORMAL")
    yield store
    store.close()


@pytest.fixture
def normal_store(tmp_path: Path) -> Iterator[SQLiteStore]:
    """A SQLite file with synchronous NORMAL: the store light mode and the deferred store run on."""
    store = SQLiteStore(str(tmp_path / "normal.db"), synchronous="NORMAL")
    yield store
    store.close()


@pytest.fixture
def make_engine(tmp_path: Path) -> Iterator[Callable[..., tuple[Engine, SQLiteStore]]]:
    """A factory of engines, each over its own SQLite file, closed at the end (for property
    tests that start over at each example): ``make_engine(**engine_options)``."""
    made: list[tuple[Engine, SQLiteStore]] = []

    def make(**options: Any) -> tuple[Engine, SQLiteStore]:
        store = SQLiteStore(str(tmp_path / f"p{len(made)}.db"))
        engine = Engine(store, **{"model": "gpt-4o-mini", "background_precompact": False,
                                  **options})
        made.append((engine, store))
        return engine, store

    yield make
    for engine, store in made:
        engine.close()
        store.close()
