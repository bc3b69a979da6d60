"""Passes the proxy makes over every request body and its messages: in C where
``refold._jsonscan`` is built (``setup.py``; optional, like the search's C modules), in Python
otherwise, with the same answers.

- ``deeper_than(raw, limit)``: whether the JSON text ``raw`` (already parsed: valid JSON) nests
  arrays and objects more than ``limit`` levels deep. In C, a scan of the bytes (a string is
  skipped to its closing quote with ``memchr``): ~0.03 ms for an agent's 350 KB request,
  against ~0.6 ms for the walk of its parsed value. Without the C module: None (the caller
  walks the value).
- ``same(a, b)``: whether two decoded JSON values are exactly the same: what ``repr(a) ==
  repr(b)`` says (types at every level, so ``1``, ``1.0`` and ``True`` differ; key order; the
  same strings and numbers), without building either text. ``==`` is not enough: ``{"a": 1} ==
  {"a": True}``, and ``{"a": 1, "b": 2} == {"b": 2, "a": 1}`` although ``json.dumps`` of each
  differs. A value of another type (not dict, list, str, int, float, bool, None) is never the
  same as anything but itself in C; the Python fallback compares ``repr``. ``prefix(a, b)``:
  how many leading items of two lists are so.
- ``copier()``: ``messages.model.copy_json`` in C (~5x the Python one on messages), or None.
- ``digit_run(raw, length)`` and ``unusual(value)``: what ``refold.fastjson`` checks before
  it lets orjson read or write what the json module would (a long number; a non-finite float,
  a non-str key, a value of another type), or None without the C module.
- ``anthropic_blocks(messages)``: which of an Anthropic request's messages hold a
  ``cache_control`` marker, and whether any text block lacks its text (``server.
  anthropic_wire.strip_cache_control`` and ``server.messages_api.check_fields`` then look only
  there), or None without the C module.

``REFOLD_NATIVE=0`` turns the C module off (as for the search's).
"""

from __future__ import annotations

import copy
import functools
import os
from collections.abc import Callable
from types import ModuleType
from typing import Any

_native: ModuleType | None
try:
    from refold import _jsonscan as _native
except ImportError:  # pragma: no cover - built by setup.py; optional
    _native = None
if os.environ.get("REFOLD_NATIVE", "1") == "0":
    _native = None


def native() -> bool:
    """Is the C module built and in use?"""
    return _native is not None


def deeper_than(raw: bytes, limit: int) -> bool | None:
    """Whether ``raw`` nests more than ``limit`` levels deep; None without the C module."""
    if _native is None:
        return None
    return bool(_native.deeper_than(raw, limit))


def same(a: Any, b: Any) -> bool:
    """Whether two decoded JSON values are exactly the same (see the module doc)."""
    if _native is not None:
        return bool(_native.same(a, b))
    return a is b or repr(a) == repr(b)


def prefix(a: list[Any], b: list[Any]) -> int:
    """How many leading items of two lists are the same value (``same``)."""
    if _native is not None:
        return int(_native.prefix(a, b))
    count = 0
    for x, y in zip(a, b, strict=False):
        if not same(x, y):
            break
        count += 1
    return count


def digit_run(raw: bytes, length: int) -> bool | None:
    """Whether ``raw`` holds ``length`` or more ASCII digits in a row; None without the C
    module (it looks at every ``length``-th byte: ~20x ``bytes.translate`` and ``find``)."""
    if _native is None:
        return None
    return bool(_native.digit_run(raw, length))


def unusual(value: Any) -> bool | None:
    """Whether ``value`` holds a float that is not finite, a key that is not a str, or a value
    of a type JSON decoding does not build; None without the C module."""
    if _native is None:
        return None
    return bool(_native.unusual(value))


def anthropic_blocks(messages: list[Any], marker: str = "cache_control"
                     ) -> tuple[list[int], bool] | None:
    """For an Anthropic request's ``messages``: the indices of those whose content list holds
    a block with the key ``marker``, and whether a text block (in a content list, or in a
    ``tool_result``'s content list) lacks a str ``text``; None without the C module."""
    if _native is None:
        return None
    return _native.anthropic_blocks(messages, marker)


def copier() -> Callable[[Any], Any] | None:
    """The C copy of a JSON value (``messages.model.copy_json``'s; any other value inside goes
    to ``copy.deepcopy``), or None without the C module."""
    if _native is None:
        return None
    return functools.partial(_native.copy, copy.deepcopy)


__all__ = ["anthropic_blocks", "copier", "deeper_than", "digit_run", "native", "prefix", "same",
           "unusual"]
