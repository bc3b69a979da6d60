"""Fixtures shared by the integration tests: an engine, and Hermes plugin backends."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from refold.integrations.hermes import Backend
from refold.runtime.engine import Engine
from refold.store import Store


@pytest.fixture
def engine(store: Store) -> Iterator[Engine]:
    """An engine over the test's store (both backends), closed after the test."""
    engine = Engine(store, model="gpt-4o-mini", context_length=100_000,
                    background_precompact=False)
    yield engine
    engine.close()


@pytest.fixture
def make_backend(store: Store) -> Iterator[Callable[[int], Backend]]:
    """``make_backend(context_length)``: a Hermes plugin backend over the test's store (both
    backends), its default engine on that window; every engine it opened closed after."""
    made: list[Backend] = []

    def make(context_length: int) -> Backend:
        made.append(Backend(Engine(store, model="gpt-4o-mini", context_length=context_length,
                                   background_precompact=False)))
        return made[-1]

    yield make
    for backend in made:
        for engine in backend.engines.values():
            engine.close()
