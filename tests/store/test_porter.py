"""``porter.word_token`` (a query word's stem computed in Python) against the FTS5 of the running
SQLite, which stemmed every indexed message: the same token for every rule of every step, for
many thousand real words and for generated ones; anything not plain ASCII goes to FTS5."""

from __future__ import annotations

import re
import sysconfig
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refold.store.sqlite import porter, wordindex
from refold.store.sqlite.wordindex import memory_fts

SUFFIXES = sorted({suffix for step in (porter._STEP2, porter._STEP3, porter._STEP4)
                   for suffix, _, _ in step} | {
    "s", "ss", "sses", "ies", "es", "eed", "ed", "ing", "ated", "bled", "ized", "ating",
    "hopping", "filing", "failing", "y", "ly", "e", "ll", "ement", "ion", "sion", "tion"})
STEMS = ["", "a", "b", "y", "ay", "by", "tr", "hop", "fil", "cat", "rat", "con", "gener",
         "relat", "sens", "trouble", "cr", "feed", "agree", "sky", "tree", "happ", "cont",
         "adopt", "2b", "x9", "oil", "yell", "bow", "box", "tiny", "allow", "contr", "rev"]


def fts5_tokens(words: list[str]) -> list[tuple[str, ...]]:
    """What FTS5 (the word index's tokenizer) makes of each word, in one batch."""
    conn = memory_fts("probe")
    try:
        conn.execute("BEGIN")
        conn.executemany("INSERT INTO probe(rowid, text) VALUES (?, ?)", enumerate(words))
        found: dict[int, list[tuple[int, str]]] = {}
        for term, doc, offset in conn.execute('SELECT term, doc, "offset" FROM probe_terms'):
            found.setdefault(doc, []).append((offset, term))
        conn.execute("ROLLBACK")
    finally:
        conn.close()
    return [tuple(term for _, term in sorted(found.get(i, []))) for i in range(len(words))]


def mismatches(words: list[str]) -> list[tuple[str, tuple[str, ...], str | None]]:
    return [(w, want, porter.word_token(w)) for w, want in zip(words, fts5_tokens(words),
                                                               strict=True)
            if (porter.word_token(w),) != want]


def test_the_index_uses_the_tokenizer_porter_computes() -> None:
    assert wordindex.TOKENIZE == wordindex.PORTER_UNICODE61


def test_every_rule_with_stems_before_it_matches_fts5() -> None:
    words = [stem + suffix for stem in STEMS for suffix in SUFFIXES if stem + suffix]
    words += [w.upper() for w in words[:200]] + [w.capitalize() for w in words[200:400]]
    assert len(words) > 2000
    assert mismatches(words) == []


def test_real_words_match_fts5() -> None:
    """Every distinct ASCII word of the standard library's own modules (~20k, code and prose)."""
    words: set[str] = set()
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))[:400]:
        words.update(re.findall(r"[A-Za-z0-9]+", path.read_text(errors="ignore")))
    assert len(words) > 10_000
    assert mismatches(sorted(words)) == []


def test_lengths_at_the_edges_pass_through_as_fts5_does() -> None:
    words = ["ab", "is", "ies", "sss", "eed", "ing", "aed", "yed", "e" * 63 + "s",
             "a" * 64, "a" * 62 + "ing", "a" * 63 + "ed", "a" * 65 + "ing", "b" * 70 + "s"]
    assert mismatches(words) == []
    assert porter.word_token("a" * 65 + "ing") == "a" * 65 + "ing"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet="aeiouybcdlmnrstwxzgkp0129ABEIY", min_size=1, max_size=70),
                min_size=1, max_size=60),
       st.lists(st.sampled_from(SUFFIXES), min_size=1, max_size=60))
def test_generated_words_match_fts5(heads: list[str], tails: list[str]) -> None:
    words = [head + tail for head, tail in zip(heads, tails * 60, strict=False)] + heads
    assert mismatches(words) == []


@pytest.mark.parametrize("word", ["", "café", "e-mail", "naïve", "日本", "snake_case", "a b",
                                  "x\u00a0y", "ǅemal"])
def test_anything_but_plain_ascii_is_left_to_fts5(word: str) -> None:
    assert porter.word_token(word) is None
    assert wordindex.word_tokens(word) == fts5_tokens([word])[0]
