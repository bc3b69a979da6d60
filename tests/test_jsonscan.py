"""``refold.jsonscan``: the C module's answers equal the Python references on generated JSON.

``deeper_than`` against a recursive depth of the parsed value, on texts written several ways
(escaped quotes and backslashes, brackets inside strings, indentation, non-ASCII kept);
``same`` against ``repr(a) == repr(b)`` on pairs that differ in the ways ``==`` misses (1, 1.0
and True; key order; -0.0).
"""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refold import jsonscan


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


# strings full of what a scan could trip on: quotes, backslashes, brackets, non-ASCII
_TRICKY = st.text(alphabet=st.sampled_from('ab"\\[]{}:,é中\n'), max_size=6)
_SCALARS = (st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from([0.0, -0.0, 1.0, 1.5])
            | _TRICKY)
_JSON = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(_TRICKY, inner, max_size=3), max_leaves=30)


def _texts(value: Any) -> list[bytes]:
    return [json.dumps(value).encode(), json.dumps(value, ensure_ascii=False).encode(),
            json.dumps(value, indent=2).encode(), orjson.dumps(value)]


@pytest.mark.usefixtures("native_jsonscan")
@settings(max_examples=400, deadline=None)
@given(_JSON, st.integers(0, 8))
def test_the_scan_finds_exactly_the_bodies_nested_deeper_than_the_limit(value: Any,
                                                                         limit: int) -> None:
    deep = _depth(value) > limit
    for raw in _texts(value):
        assert jsonscan.deeper_than(raw, limit) is deep, raw


@pytest.mark.usefixtures("native_jsonscan")
def test_the_scan_on_strings_that_end_in_backslashes_and_hold_brackets() -> None:
    for text in ["\\", "\\\\", "a\\\"[[[", "\"", "]]]\\", "{{{{"]:
        value = [text, [[1]]]
        raw = json.dumps(value).encode()
        assert jsonscan.deeper_than(raw, 2) is True and jsonscan.deeper_than(raw, 3) is False
        assert jsonscan.deeper_than(json.dumps({"k": text}).encode(), 1) is False
    assert jsonscan.deeper_than(b"[" * 5000 + b"]" * 5000, 100) is True
    assert jsonscan.deeper_than(b'"[[[["', 0) is False
    assert jsonscan.deeper_than(b"7", 0) is False and jsonscan.deeper_than(b"[]", 0) is True


def _swap(value: Any) -> Any:
    """A number as another that ``==`` holds equal (or a close one): 1 <-> True, 0 <-> 0.0,
    0.0 <-> -0.0, 1.5 -> 1.5 (kept)."""
    if value is True or value is False:
        return int(value)
    if type(value) is int:
        return True if value == 1 else float(value)
    if type(value) is float:
        return -value if value == 0 else int(value) if value.is_integer() else value
    return value


def _numbers_swapped(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _numbers_swapped(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_numbers_swapped(v) for v in value]
    return _swap(value)


def _variant(value: Any, data: st.DataObject) -> Any:
    """``value`` with one change ``==`` may not see, or unchanged (a JSON round trip)."""
    kind = data.draw(st.sampled_from(["copy", "number", "order", "leaf"]))
    copy = json.loads(json.dumps(value))
    if kind == "number":
        return _numbers_swapped(copy)
    if kind == "order" and isinstance(copy, dict):
        return dict(reversed(list(copy.items())))
    return [copy] if kind == "leaf" else copy


def _check_same(data: st.DataObject, value: Any) -> None:
    other = _variant(value, data)
    assert jsonscan.same(value, other) is (repr(value) == repr(other))
    assert jsonscan.same(other, value) is (repr(value) == repr(other))


@pytest.mark.usefixtures("native_jsonscan")
@settings(max_examples=400, deadline=None)
@given(data=st.data(), value=_JSON)
def test_same_is_exactly_repr_equality_in_c(data: st.DataObject, value: Any) -> None:
    assert jsonscan.native()
    _check_same(data, value)


@settings(max_examples=200, deadline=None)
@given(data=st.data(), value=_JSON)
def test_same_is_exactly_repr_equality_without_the_c_module(data: st.DataObject,
                                                             value: Any) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(jsonscan, "_native", None)
        assert not jsonscan.native()
        _check_same(data, value)


@pytest.mark.usefixtures("native_jsonscan")
def test_same_tells_apart_what_equality_does_not() -> None:
    assert not jsonscan.same(1, True) and not jsonscan.same(1, 1.0) and 1 == True
    assert not jsonscan.same({"a": 1, "b": 2}, {"b": 2, "a": 1})
    assert not jsonscan.same(0.0, -0.0) and jsonscan.same(-0.0, -0.0)
    assert not jsonscan.same(float("nan"), float("nan"))
    assert jsonscan.same({"a": [1, "x", None, 2.5, {"b": False}]},
                         {"a": [1, "x", None, 2.5, {"b": False}]})
    assert not jsonscan.same(tuple([1, 2]), tuple([1, 2]))  # not JSON: only the same object is
    marker = object()
    assert jsonscan.same(marker, marker)


@pytest.mark.usefixtures("native_jsonscan")
def test_same_on_values_too_deep_to_compare_raises_recursion_error() -> None:
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    other = json.loads(json.dumps([]))
    for _ in range(100_000):
        other = [other]
    with pytest.raises(RecursionError):
        jsonscan.same(deep, other)


_DIGITS = bytes(0x30 if 0x30 <= c <= 0x39 else 0x20 for c in range(256))


@pytest.mark.usefixtures("native_jsonscan")
@settings(max_examples=500, deadline=None)
@given(st.lists(st.one_of(st.integers(0, 40).map(lambda n: b"7" * n),
                          st.binary(max_size=5), st.sampled_from([b"-", b".", b"e", b"\x00"])),
                max_size=12), st.integers(1, 25))
def test_a_digit_run_is_found_exactly_where_translate_and_find_see_one(
        parts: list[bytes], length: int) -> None:
    raw = b"".join(parts)
    assert jsonscan.digit_run(raw, length) is (raw.translate(_DIGITS).find(b"0" * length) >= 0)


def _unusual(value: Any) -> bool:
    if isinstance(value, float):
        return value != value or value in (float("inf"), float("-inf"))
    if type(value) is dict:
        return any(type(k) is not str or _unusual(v) for k, v in value.items())
    if type(value) is list:
        return any(map(_unusual, value))
    return type(value) not in (str, int, bool, type(None))


@pytest.mark.usefixtures("native_jsonscan")
@settings(max_examples=400, deadline=None)
@given(st.recursive(_SCALARS | st.floats() | st.sampled_from([(1,), b"x", 1j]),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(_TRICKY | st.integers(0, 2), inner, max_size=3),
                    max_leaves=20))
def test_unusual_finds_non_finite_floats_non_str_keys_and_other_types(value: Any) -> None:
    assert jsonscan.unusual(value) is _unusual(value)
