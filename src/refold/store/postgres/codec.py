"""Lossless text encoding for PostgreSQL, which rejects NUL bytes and lone surrogates in ``text``.

Invariants:
- ``decode_json(encode_json(v)) == v`` for every JSON value Python can hold, including strings
  with ``\\x00`` and lone surrogates (``\\ud800``): JSON escapes NUL as ``\\u0000`` and, when a
  string cannot be encoded as UTF-8, the whole document falls back to ASCII escapes. Stored
  message bodies are therefore byte-for-byte recoverable while staying readable (non-ASCII kept)
  in the common case.
- ``clean_text`` is lossy on purpose and only feeds derived columns (the searchable text): NUL is
  dropped and lone surrogates become U+FFFD, so indexing never fails on odd input.
"""

from __future__ import annotations

import json
import re
from typing import Any

from refold.search.natural import GLUED_MARK, glued_in
from refold.search.query import cjk_grams

_SURROGATE = re.compile("[\ud800-\udfff]")


def encode_json(value: Any) -> str:
    """JSON text that PostgreSQL accepts in a ``text`` column and that decodes to ``value``."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    if _SURROGATE.search(text):
        # A lone surrogate cannot be sent as UTF-8; ASCII escapes keep it recoverable.
        text = json.dumps(value, ensure_ascii=True, separators=(",", ":"))
    return text


def decode_json(text: str) -> Any:
    return json.loads(text)


def clean_text(text: str) -> str:
    """``text`` without NUL and with lone surrogates replaced: safe for derived, indexed columns."""
    if "\x00" in text:
        text = text.replace("\x00", "")
    if _SURROGATE.search(text):
        text = _SURROGATE.sub("\ufffd", text)
    return text


def cjk_gram_list(text: str) -> list[str] | None:
    """The CJK unigrams and bigrams of ``text`` for the gram index, and each ASCII word glued
    to its CJK text as ``~word`` (``用pytest跑``: ``~pytest``; ``refold.search.natural.glued_in``);
    None when it has no CJK."""
    grams = cjk_grams(text)
    if not grams:
        return None
    return grams.split(" ") + [GLUED_MARK + word for word in glued_in(text)]
