"""The ``on_pre_compress`` return contract: text to keep in the summary, "" for nothing; the
manager drops what is not usable text (None, non-strings, blanks) and a failing provider."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from refold.memory.manager import MemoryManager
from refold.memory.provider import BuiltinMemoryProvider
from refold.messages.model import Message
from refold.testing.memory import FailingProvider, RecordingProvider, in_memory_store


class Returns(RecordingProvider):
    def __init__(self, value: Any) -> None:
        super().__init__("returns")
        self.value = value

    def on_pre_compress(self, messages: Sequence[Message]) -> Any:
        return self.value


def _manager(external: RecordingProvider) -> MemoryManager:
    manager = MemoryManager(BuiltinMemoryProvider(in_memory_store()))
    manager.add_provider(external)
    return manager


@pytest.mark.parametrize("value", [None, "", "  \n\n ", 42, ["a list"]])
def test_unusable_returns_become_nothing(value: Any) -> None:
    manager = _manager(Returns(value))
    try:
        assert manager.on_pre_compress([{"role": "user", "content": "hi"}]) == ""
    finally:
        manager.shutdown()


def test_text_is_returned_and_a_failure_is_isolated() -> None:
    manager = _manager(Returns("the user's db is db-7"))
    failing = _manager(FailingProvider("down"))
    try:
        assert manager.on_pre_compress([]) == "the user's db is db-7"
        assert failing.on_pre_compress([]) == ""
    finally:
        manager.shutdown()
        failing.shutdown()
