"""Fixtures shared by the openai-agents session tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from refold.runtime.engine import Engine
from refold.store import Store


@pytest.fixture
def engine(store: Store) -> Iterator[Engine]:
    """An engine over the test's store (both backends), closed after the test."""
    engine = Engine(store, model="gpt-4o-mini", context_length=100_000,
                    background_precompact=False)
    yield engine
    engine.close()
