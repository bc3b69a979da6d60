"""The token SQLite's FTS5 ``porter`` tokenizer (over ``unicode61``) makes of a plain ASCII word,
computed in Python: a search's query words without the in-memory FTS5 table that
``wordindex.Tokenizer`` opens (~0.7 ms in a new process, ~0.06–0.2 ms a word).

Only words of ASCII letters and digits take this path (``word_token``; anything else goes to
FTS5 itself): ``unicode61`` makes one lower-cased token of such a word, and FTS5's stemmer
leaves a token shorter than 3 or longer than 64 bytes as it is. The stemmer is Porter's (1980)
as FTS5 applies it: each step picks the first listed suffix the word ends with (the word longer
than the suffix) and applies it only if the rest meets the step's condition; ``y`` is a vowel
after a consonant when counting the measure, after any first letter when asking "holds a
vowel"; digits are consonants. ``tests/store/test_porter.py`` compares every rule, and many
thousand words, with the FTS5 of the running SQLite.
"""

from __future__ import annotations

from collections.abc import Callable

SHORTEST, LONGEST = 3, 64  # FTS5 stems tokens of 3 to 64 bytes
_VOWELS = frozenset("aeiou")


def _gobble(stem: str, start: int, after_consonant: bool) -> int:
    """From ``start``: past one run of vowels and the consonant after it, the index after that
    consonant; 0 when there is none (one more vowel-consonant sequence in the measure)."""
    consonant = after_consonant
    i, n = start, len(stem)
    while i < n:
        c = stem[i]
        consonant = not (c in _VOWELS or (consonant and c == "y"))
        if not consonant:
            break
        i += 1
    i += 1
    while i < n:
        c = stem[i]
        consonant = not (c in _VOWELS or (consonant and c == "y"))
        if consonant:
            return i + 1
        i += 1
    return 0


def _m_above_0(stem: str) -> bool:
    return _gobble(stem, 0, False) != 0


def _m_above_1(stem: str) -> bool:
    n = _gobble(stem, 0, False)
    return n != 0 and _gobble(stem, n, True) != 0


def _m_is_1(stem: str) -> bool:
    n = _gobble(stem, 0, False)
    return n != 0 and _gobble(stem, n, True) == 0


def _cvc(stem: str) -> bool:
    """Ends consonant, vowel, consonant, the last not w, x or y (Porter's ``*o``)."""
    if stem[-1] in "wxy":
        return False
    kinds = 0
    consonant = False
    for c in stem:
        consonant = not (c in _VOWELS or (consonant and c == "y"))
        kinds = ((kinds << 1) | consonant) & 0b111
    return kinds == 0b101


def _has_vowel(stem: str) -> bool:
    return any(c in _VOWELS or (i and c == "y") for i, c in enumerate(stem))


def _m_above_1_s_or_t(stem: str) -> bool:
    return stem[-1] in "st" and _m_above_1(stem)


Rule = tuple[str, str, Callable[[str], bool]]

_STEP2: tuple[Rule, ...] = (
    ("ational", "ate", _m_above_0), ("tional", "tion", _m_above_0),
    ("enci", "ence", _m_above_0), ("anci", "ance", _m_above_0),
    ("izer", "ize", _m_above_0), ("logi", "log", _m_above_0),
    ("bli", "ble", _m_above_0), ("alli", "al", _m_above_0), ("entli", "ent", _m_above_0),
    ("eli", "e", _m_above_0), ("ousli", "ous", _m_above_0),
    ("ization", "ize", _m_above_0), ("ation", "ate", _m_above_0), ("ator", "ate", _m_above_0),
    ("alism", "al", _m_above_0), ("iveness", "ive", _m_above_0),
    ("fulness", "ful", _m_above_0), ("ousness", "ous", _m_above_0),
    ("aliti", "al", _m_above_0), ("iviti", "ive", _m_above_0), ("biliti", "ble", _m_above_0),
)
_STEP3: tuple[Rule, ...] = (
    ("ical", "ic", _m_above_0), ("ness", "", _m_above_0), ("icate", "ic", _m_above_0),
    ("iciti", "ic", _m_above_0), ("ful", "", _m_above_0), ("ative", "", _m_above_0),
    ("alize", "al", _m_above_0),
)
_STEP4: tuple[Rule, ...] = tuple(
    (suffix, "", _m_above_1_s_or_t if suffix == "ion" else _m_above_1) for suffix in (
        "al", "ance", "ence", "er", "ic", "able", "ible", "ant", "ement", "ment", "ent", "ion",
        "ou", "ism", "ate", "iti", "ous", "ive", "ize"))


def _step(word: str, rules: tuple[Rule, ...]) -> str:
    """The first rule whose suffix ``word`` ends with (and is longer than), applied if its
    condition holds of the rest; ``word`` unchanged otherwise."""
    for suffix, output, condition in rules:
        if len(word) > len(suffix) and word.endswith(suffix):
            stem = word[:len(word) - len(suffix)]
            return stem + output if condition(stem) else word
    return word


def stem(token: str) -> str:
    """The FTS5 porter stem of ``token`` (lower-case ASCII letters and digits)."""
    n = len(token)
    if n < SHORTEST or n > LONGEST:
        return token
    w = token
    # 1a: plurals
    if w[-1] == "s":
        if w[-2] == "e":
            two = (n > 4 and w[-4:-2] == "ss") or (n > 3 and w[-3] == "i")  # -sses, -ies
            w = w[:-2] if two else w[:-1]
        elif w[-2] != "s":
            w = w[:-1]
    # 1b: -eed, -ed, -ing
    stripped = False
    if len(w) > 3 and w.endswith("eed"):
        if _m_above_0(w[:-3]):
            w = w[:-1]
    elif len(w) > 2 and w.endswith("ed"):
        if _has_vowel(w[:-2]):
            w, stripped = w[:-2], True
    elif len(w) > 3 and w.endswith("ing") and _has_vowel(w[:-3]):
        w, stripped = w[:-3], True
    if stripped:
        if len(w) > 2 and w[-2:] in ("at", "bl", "iz"):
            w += "e"
        else:
            c = w[-1]
            if c not in _VOWELS and c not in "lsz" and len(w) > 1 and c == w[-2]:
                w = w[:-1]
            elif _m_is_1(w) and _cvc(w):
                w += "e"
    # 1c: y after a vowel-holding stem
    if w[-1] == "y" and _has_vowel(w[:-1]):
        w = w[:-1] + "i"
    w = _step(_step(_step(w, _STEP2), _STEP3), _STEP4)
    # 5a, 5b
    if w[-1] == "e":
        rest = w[:-1]
        if _m_above_1(rest) or (_m_is_1(rest) and not _cvc(rest)):
            w = rest
    if len(w) > 1 and w.endswith("ll") and _m_above_1(w[:-1]):
        w = w[:-1]
    return w


def word_token(word: str) -> str | None:
    """The one token FTS5's ``porter unicode61`` tokenizer makes of ``word`` when it is ASCII
    letters and digits only; None for anything else (FTS5 must say)."""
    if not (word.isascii() and word.isalnum()):
        return None
    return stem(word.lower())
