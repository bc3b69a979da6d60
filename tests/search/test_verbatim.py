"""A query pasted word for word (an error line, a line of code) finds the message it came from
first, ahead of short messages that share its words in another order (``rank.verbatim_first``)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refold.search.rank import verbatim_first, verbatim_pattern
from refold.search.vectors import hybrid_search
from refold.store import SearchQuery, Store
from refold.store.base import SearchHit

PASTED = "ValueError: could not convert string to float: 'abc'"
FILLER = "\n".join(f"  File \"/app/step_{i}.py\", line {i * 7}, in run_step_{i}" for i in range(40))


def tool(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def archive(store: Store) -> None:
    s = store.create_session()
    store.append_messages(s.id, [
        tool(f"Traceback (most recent call last):\n{FILLER}\n{PASTED}\n"),
        tool("abc string float: could not convert, a ValueError"),
        tool("float string abc ValueError convert"),
        tool("string to float conversions of abc are checked before convert"),
    ])


def test_the_message_holding_a_pasted_line_comes_first(store: Store) -> None:
    archive(store)
    hits = store.search(SearchQuery(PASTED, window=0))
    assert PASTED in hits[0].content
    assert len(hits) == 4  # the others still follow, in their order
    # the same with other whitespace and case, as a terminal or an editor pastes it
    again = store.search(SearchQuery("  valueerror:   could not convert\tstring to FLOAT: 'abc' ",
                                     window=0))
    assert PASTED in again[0].content
    # newest first stays newest first
    newest = store.search(SearchQuery(PASTED, window=0, sort="recency"))
    assert newest[0].content.startswith("string to float conversions")


def test_hybrid_and_fts_modes_put_it_first_too(sqlite_store: Store) -> None:
    archive(sqlite_store)
    hits = hybrid_search(sqlite_store, SearchQuery(PASTED, window=0), mode="fts")
    assert PASTED in hits[0].content


def _hit(content: str) -> SearchHit:
    return SearchHit("s", None, 1, "user", content, content, 0.0, 1.0)


def test_short_queries_say_no_more_than_their_words() -> None:
    assert verbatim_pattern("pytest") is None
    assert verbatim_pattern("migrations") is None  # one word: the index scored it already
    assert verbatim_pattern("a b") is None  # too short to be a pasted line
    assert verbatim_pattern("连接超时了怎么办啊请问一下") is not None  # CJK has no spaces
    hits = [_hit("the port is 5433 here"), _hit("which port is 5433?")]
    assert verbatim_first(hits, "which port is 5433?") == hits[::-1]
    assert verbatim_first(hits, "port") == hits


def test_odd_text_never_raises() -> None:
    for text in ["", "   ", "((((", "\ud800 lone surrogate here", "*" * 5000, "\\s+ [a-z] $1 (?P<x>)"]:
        verbatim_first([_hit("x"), _hit(text)], text)


def _reference(hits: list[SearchHit], text: str) -> list[SearchHit]:
    """``verbatim_first`` as the pattern alone says it: every hit searched."""
    pattern = verbatim_pattern(text)
    if pattern is None or len(hits) < 2:
        return hits
    held = [pattern.search(hit.content.lower()) is not None for hit in hits]
    if not any(held) or all(held):
        return hits
    return [h for h, k in zip(hits, held, strict=True) if k] + \
        [h for h, k in zip(hits, held, strict=True) if not k]


WORDS = ["port", "Port", "is", "5433", "5433?", "which", "the", "连接超时", "了", "a.b", "(x)"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.lists(st.sampled_from(WORDS), max_size=8), min_size=0, max_size=6),
       st.lists(st.sampled_from(WORDS), min_size=1, max_size=5),
       st.lists(st.sampled_from([" ", "  ", "\n", "\t "]), min_size=8, max_size=8))
def test_the_word_check_before_the_pattern_changes_no_order(
        contents: list[list[str]], query: list[str], gaps: list[str]) -> None:
    hits = [_hit("".join(w + gaps[i % len(gaps)] for i, w in enumerate(words)).strip())
            for words in contents]
    text = " ".join(query) + "?"
    assert verbatim_first(hits, text) == _reference(hits, text)


def test_a_sentence_no_hit_holds_compiles_no_pattern(monkeypatch: pytest.MonkeyPatch) -> None:
    import refold.search.rank as rank

    compiled: list[str] = []
    real = rank.re.compile
    monkeypatch.setattr(rank.re, "compile", lambda p, *a: compiled.append(p) or real(p, *a))
    hits = [_hit("the retry budget was raised"), _hit("budget for the quarter")]
    assert verbatim_first(hits, "when did we raise the retry budget?") == hits
    assert compiled == []
    assert verbatim_first(hits, "the retry budget was raised") == hits  # first already
    assert verbatim_first(hits[::-1], "The retry  budget was raised.") == hits
    assert len(compiled) == 2
