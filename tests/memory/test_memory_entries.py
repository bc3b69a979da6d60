"""Entry parsing and rendering: the "\\n§\\n" format, duplicates, round trips."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from refold.memory.entries import (
    ENTRY_DELIMITER,
    char_count,
    parse_entries,
    render_entries,
    usage_of,
)


def test_split_on_the_full_delimiter_only() -> None:
    raw = "see § 5 of the contract\n§\nsecond\nline\n§\n§ starts here"
    assert parse_entries(raw) == ["see § 5 of the contract", "second\nline", "§ starts here"]


def test_exact_duplicates_collapse_first_wins() -> None:
    raw = ENTRY_DELIMITER.join(["a", "b", "a", "c", "b"])
    assert parse_entries(raw) == ["a", "b", "c"]


def test_empty_and_blank_entries_are_dropped() -> None:
    assert parse_entries("") == []
    assert parse_entries("  \n\n") == []
    assert parse_entries("a\n§\n   \n§\nb\n") == ["a", "b"]


def test_multiline_cjk_emoji_round_trip() -> None:
    entries = ["用户喜欢简短的回答", "line one\nline two", "ship it 🚀 👨\u200d👩\u200d👧", "§ 5"]
    assert parse_entries(render_entries(entries)) == entries


def test_crlf_files_keep_their_entries() -> None:
    assert parse_entries("a\r\n§\r\nb\r\n") == ["a", "b"]


def test_usage_counts_characters_with_delimiters() -> None:
    assert char_count(["ab", "cd"]) == 2 + len(ENTRY_DELIMITER) + 2
    usage = usage_of("memory", ["x" * 1100], 2200)
    assert usage.percent == 50 and usage.fraction() == "1,100/2,200"
    assert "OVER LIMIT" in usage_of("user", ["x" * 20], 10).describe()


entry_text = st.text(min_size=1, max_size=40).map(str.strip).filter(
    lambda t: bool(t) and ENTRY_DELIMITER not in f"\n{t}\n" and "\r" not in t)


@given(st.lists(entry_text, max_size=8, unique=True))
def test_round_trip_property(entries: list[str]) -> None:
    assert parse_entries(render_entries(entries)) == entries
    assert render_entries(parse_entries(render_entries(entries))) == render_entries(entries)
