"""Fixtures for runtime tests: an Engine over each store backend with a small window."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from refold.runtime import Engine
from refold.store import Store

from ._helpers import WINDOW


@pytest.fixture
def engine(store: Store, tmp_path: Path) -> Iterator[Engine]:
    eng = Engine(store, model="gpt-4o-mini", context_length=WINDOW,
                 memory_dir=tmp_path / "memories")
    yield eng
    eng.close()
