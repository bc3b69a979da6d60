"""Fixtures for runtime tests: an Engine over each store backend with a small window."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from refold.runtime import Engine
from refold.store import Store
from refold.store.sqlite import SQLiteStore

from ._helpers import WINDOW


@pytest.fixture
def engine(store: Store, tmp_path: Path) -> Iterator[Engine]:
    eng = Engine(store, model="gpt-4o-mini", context_length=WINDOW,
                 memory_dir=tmp_path / "memories")
    yield eng
    eng.close()


@pytest.fixture
def normal_store(tmp_path: Path) -> Iterator[SQLiteStore]:
    """A SQLite file with synchronous NORMAL: the store light mode and the deferred store run on."""
    store = SQLiteStore(str(tmp_path / "normal.db"), synchronous="NORMAL")
    yield store
    store.close()
