"""Near-duplicate memory entries: normalised-token similarity, no model needed.

An entry becomes a set of *features*: Latin words lower-cased, filler dropped ("prefers",
"output", "the"…) and lightly stemmed ("prefers"/"preferred" → "prefer", "tests" → "test");
a CJK run becomes its character bigrams (Chinese has no spaces, and single characters are too
common to tell entries apart), with the framing every extracted entry shares ("用户", "喜欢",
"记住") taken out first. Two entries are near-duplicates when their features overlap enough:
the overlap coefficient (shared / smaller set) is at least ``DUPLICATE_SHARE`` with at least two
shared features (or one, when the smaller entry has a single feature and it is shared), and the
Jaccard index is at least ``MIN_JACCARD`` so that a short entry is not swallowed by a long
unrelated one. A number one side holds and the other does not makes two facts (port 5433 is not
port 5434). An entry that holds several facts ("…; wants minimal diffs") is also compared clause
by clause: repeating one of its clauses is a repeat, saying more than the entry is not.

Pure functions; the reviewer uses them before it adds, ``memory stats`` to count pairs already
stored.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]+")
_FILLER = frozenset({
    "a", "an", "the", "of", "to", "over", "than", "and", "or", "is", "are", "be", "it", "its",
    "in", "on", "for", "with", "by", "as", "at", "use", "using", "output", "user", "prefer",
    "like", "want", "wants", "not", "no", "correction", "instead", "rather", "always", "should",
    "assistant", "that", "this", "when", "please",
    # function words and the framing a remembered sentence comes in ("for the future: our CI
    # runs …, so … here"), as 以后 / 记住 are for Chinese
    "i", "me", "my", "we", "us", "our", "you", "your", "they", "them", "their", "he", "she",
    "his", "her", "so", "here", "there", "then", "also", "just", "very", "was", "were", "been",
    "has", "have", "had", "do", "does", "did", "will", "would", "can", "could", "from", "into",
    "about", "future", "remember", "note", "now", "which", "who",
})
_CJK_FILLER = re.compile(r"用户|用戶|喜欢|喜歡|偏好|希望|记住|記住|要求|以后|以後|总是|總是|使用|一般|习惯|習慣")
DUPLICATE_SHARE = 0.66
MIN_JACCARD = 0.34


def _stem(word: str) -> str:
    """A light suffix strip: enough to match "prefers"/"preferred", "tests"/"testing".
    Numbers and identifiers with digits stay as they are ("5433" is not "543")."""
    if not word.isalpha():
        return word
    for suffix in ("ingly", "edly", "ing", "ed", "es", "ly", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            break
    if len(word) > 3 and word[-1] == word[-2]:  # "preferr" (preferred) → "prefer"
        word = word[:-1]
    return word


def features(text: str) -> frozenset[str]:
    """The normalised features of one entry (see the module docstring)."""
    out: set[str] = set()
    lowered = text.lower()
    for run in _CJK.findall(lowered):
        run = _CJK_FILLER.sub(" ", run)
        for part in run.split():
            out.update(part[i:i + 2] for i in range(max(1, len(part) - 1)))
    for word in _WORD.findall(_CJK.sub(" ", lowered)):
        stem = _stem(word)
        if stem not in _FILLER and word not in _FILLER:
            out.add(stem)
    return frozenset(out)


def _other_numbers(a: frozenset[str], b: frozenset[str]) -> bool:
    """Whether one side holds a number (a feature with a digit) the other does not: port 5433
    and port 5434 are two facts, however alike the words around them."""
    return any(any(ch.isdigit() for ch in f) for f in a ^ b)


def similar(a: frozenset[str], b: frozenset[str]) -> bool:
    """Whether two feature sets describe the same fact (the thresholds above)."""
    shared = len(a & b)
    small = min(len(a), len(b))
    if not small or shared < min(2, small) or _other_numbers(a, b):
        return False
    return shared / small >= DUPLICATE_SHARE and shared / len(a | b) >= MIN_JACCARD


_CLAUSE = re.compile(r"[;\n]|[.!?](?=\s|$)|\s[—–-]\s|\s—|—\s")


def clauses(text: str) -> list[str]:
    """The clauses of an entry that holds several facts ("Prefers `pytest -q` (quiet) output;
    wants minimal diffs."): split at semicolons, line and sentence ends and dashes."""
    return [part.strip() for part in _CLAUSE.split(text) if part.strip()]


def _covered(mine: frozenset[str], clause: frozenset[str]) -> bool:
    """Whether one clause of an entry says all that ``mine`` says: it covers nearly every
    feature of ``mine`` (a candidate holding more than the clause is not a repeat of it)."""
    shared = len(mine & clause)
    if not mine or shared < min(2, len(mine)) or _other_numbers(mine, clause):
        return False
    return shared / len(mine) >= DUPLICATE_SHARE and shared / len(mine | clause) >= MIN_JACCARD


def near_duplicate(content: str, existing: Sequence[str]) -> str | None:
    """The first of ``existing`` that ``content`` nearly repeats, if any ("Prefers `pytest -q`
    (quiet) output" and "Prefers pytest -q over verbose output."). An exact repeat counts, and
    so does repeating one clause of an entry that holds several facts ("Prefers pytest -q"
    against "Prefers `pytest -q` (quiet) output; wants minimal diffs"); the other way round,
    ``content`` says more than the entry and is not a repeat."""
    mine = features(content)
    for other in existing:
        if other == content or similar(mine, features(other)):
            return other
        parts = clauses(other)
        if len(parts) > 1 and any(_covered(mine, features(part)) for part in parts):
            return other
    return None


def duplicate_pairs(texts: Sequence[str]) -> list[tuple[int, int]]:
    """Index pairs (i < j) of entries in ``texts`` that are near-duplicates of each other."""
    return [(i, j) for i in range(len(texts)) for j in range(i + 1, len(texts))
            if near_duplicate(texts[i], [texts[j]]) is not None
            or near_duplicate(texts[j], [texts[i]]) is not None]
