"""Exact token counts over the offline vocabularies quicktok ships (ids identical to tiktoken).

Vocabularies are loaded lazily (a few hundred ms each) and shared by every counter that uses
them. Special-token strings in text count as plain text, as the provider sees user text.
"""

from __future__ import annotations

import threading
from functools import cache
from typing import Any

import quicktok

from refold.errors import InvalidInput
from refold.tokens.counter import MessageCounter

ENCODINGS = ("o200k_base", "o200k_harmony", "cl100k_base", "qwen3", "llama3")
_LOAD_LOCK = threading.Lock()


@cache
def load_encoding(name: str) -> Any:
    """The quicktok tokenizer for ``name`` (loaded once per process)."""
    if name not in ENCODINGS:
        raise InvalidInput(f"unknown encoding {name!r}", hint=f"use one of {', '.join(ENCODINGS)}")
    with _LOAD_LOCK:
        return quicktok.get_encoding(name)


class ExactCounter(MessageCounter):
    """Counts with a real BPE vocabulary."""

    exact = True

    def __init__(self, encoding: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.name = encoding
        self._enc = load_encoding(encoding)

    def count_text(self, text: str) -> int:
        return int(self._enc.count(text)) if text else 0

    def encode(self, text: str) -> list[int]:
        return list(self._enc.encode_ordinary(text))

    def decode(self, ids: list[int]) -> str:
        return str(self._enc.decode(ids))
