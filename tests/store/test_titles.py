"""Title sanitizing and lineage numbering (pure functions shared by every backend)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from refold.errors import InvalidInput
from refold.store.titles import (
    MAX_TITLE_LENGTH,
    latest_lineage_title,
    like_escape,
    next_lineage_title,
    sanitize_title,
    split_lineage_title,
)


@pytest.mark.parametrize(("raw", "clean"), [
    ("  hello   world ", "hello world"),
    ("line\nbreak\ttab", "line break tab"),
    ("zero\u200bwidth\u200c\u2060\ufeff", "zerowidth"),
    ("bidi \u202eevil\u202c", "bidi evil"),
    ("bell\x07 and nul\x00", "bell and nul"),
    ("部署 计划 🚀", "部署 计划 🚀"),
    ("family 👨\u200d👩\u200d👧 ok", "family 👨\u200d👩\u200d👧 ok"),
    ("dangling \u200d joiner", "dangling joiner"),
    ("lone \ud800 surrogate", "lone surrogate"),
    ("", None), ("   \u200b ", None), (None, None),
])
def test_sanitize(raw: str | None, clean: str | None) -> None:
    assert sanitize_title(raw) == clean


def test_sanitize_cuts_to_limit_without_trailing_space() -> None:
    assert sanitize_title("x" * 250) == "x" * MAX_TITLE_LENGTH
    assert sanitize_title("a" * 99 + " b") == "a" * 99


def test_sanitize_rejects_non_text() -> None:
    with pytest.raises(InvalidInput):
        sanitize_title(42)  # type: ignore[arg-type]


@given(st.text())
def test_sanitize_output_is_clean(raw: str) -> None:
    clean = sanitize_title(raw)
    if clean is not None:
        assert clean == clean.strip() and "  " not in clean and len(clean) <= MAX_TITLE_LENGTH
        assert not any(c in clean for c in "\n\t\r\x00\u200b\ufeff")
        clean.encode("utf-8")
        assert sanitize_title(clean) == clean


def test_lineage_numbering() -> None:
    assert split_lineage_title("name #3") == ("name", 3)
    assert split_lineage_title("name") == ("name", 1)
    assert split_lineage_title("#3") == ("#3", 1)
    assert split_lineage_title("name #0") == ("name #0", 1)
    assert next_lineage_title("name", []) == "name"
    assert next_lineage_title("name", ["name"]) == "name #2"
    assert next_lineage_title("name #2", ["name", "name #2", "name #5", "names #9"]) == "name #6"
    assert latest_lineage_title("name", ["name", "name #3", "name #2"]) == "name #3"
    assert latest_lineage_title("name", ["other"]) is None
    long = "y" * MAX_TITLE_LENGTH
    assert len(next_lineage_title(long, [long])) <= MAX_TITLE_LENGTH


def test_like_escape() -> None:
    assert like_escape("50%_off\\") == "50\\%\\_off\\\\"


@given(st.text(st.characters(max_codepoint=0x7F)))
def test_printable_ascii_takes_the_short_way_to_the_same_title(raw: str) -> None:
    from refold.store.titles import _kept

    if raw.isprintable():  # sanitize_title's short way: what the character loop gives
        assert " ".join(raw.split()) == _kept(raw)
    assert sanitize_title(raw) == ((_kept(raw)[:MAX_TITLE_LENGTH].rstrip()) or None)
