"""Near-duplicate memory entries: normalised-token similarity, no model needed.

An entry becomes a set of *features*: Latin words lower-cased, filler dropped ("prefers",
"output", "the"…) and lightly stemmed ("prefers"/"preferred" → "prefer", "tests" → "test");
a CJK run becomes its character bigrams (Chinese has no spaces, and single characters are too
common to tell entries apart), with the framing every extracted entry shares ("用户", "喜欢",
"记住") taken out first. Two entries are near-duplicates when their features overlap enough:
the overlap coefficient (shared / smaller set) is at least ``DUPLICATE_SHARE`` with at least two
shared features (or one, when the smaller entry has a single feature and it is shared), and the
Jaccard index is at least ``MIN_JACCARD`` so that a short entry is not swallowed by a long
unrelated one.

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


def similar(a: frozenset[str], b: frozenset[str]) -> bool:
    """Whether two feature sets describe the same fact (the thresholds above)."""
    shared = len(a & b)
    small = min(len(a), len(b))
    if not small or shared < min(2, small):
        return False
    return shared / small >= DUPLICATE_SHARE and shared / len(a | b) >= MIN_JACCARD


def near_duplicate(content: str, existing: Sequence[str]) -> str | None:
    """The first of ``existing`` that ``content`` nearly repeats, if any ("Prefers `pytest -q`
    (quiet) output" and "Prefers pytest -q over verbose output."). An exact repeat counts."""
    mine = features(content)
    for other in existing:
        if other == content or similar(mine, features(other)):
            return other
    return None


def duplicate_pairs(texts: Sequence[str]) -> list[tuple[int, int]]:
    """Index pairs (i < j) of entries in ``texts`` that are near-duplicates of each other."""
    sets = [features(t) for t in texts]
    return [(i, j) for i in range(len(sets)) for j in range(i + 1, len(sets))
            if texts[i] == texts[j] or similar(sets[i], sets[j])]
