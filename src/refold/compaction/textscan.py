"""Regex search over many texts at once, finding what one ``finditer`` per text would find.

Two costs dominate a plain scan of a long transcript for identifiers: a Python-level call per
(text, pattern) pair — thousands of short messages times a dozen patterns — and the regex
engine trying a pattern that opens with a lookbehind or a word boundary at every position of
megabytes of tool output. ``Joined`` removes both: the texts are joined with a blank line, and
each pattern runs only over the lines where its *trigger* occurs, a cheap pattern the engine
finds at the speed of a literal or a character class.

A ``Rule`` is sound (the same matches as ``pattern.finditer`` over each text) when:
1. every match of ``pattern`` that passes ``check`` contains a position where ``trigger``
   matches;
2. no match spans a newline (``digit_lines``: none but one that directly follows a digit, and
   none spans a blank line), so matches stay inside lines and never join two texts;
3. ``pattern`` treats the end of the string as it treats a newline: it ends in ``\\b``,
   lookaheads, ``$`` with ``re.MULTILINE``, or classes that cannot match a newline.
A ``spaceless`` rule reads less of each line: from just after the last space before the line's
first trigger to the first space from its last one. Sound when, besides: no match holds a space
(so none crosses either cut, and every match lies between them: it holds a trigger and no
space); ``pattern`` treats the end of the string as it treats a space (no ``$``); no trigger
match holds a newline (each line's last one is looked for inside the line). A lookbehind or a
``\\b`` at the start still sees the text before it: ``finditer(text, pos)`` does not cut there.
``Caseless`` is the second shortcut: a case-insensitive pattern of words (``re.IGNORECASE``
disables the engine's literal and character-set skipping, so it runs at a few MB/s) searched
only when a lowercased copy of the text holds one of its words, a substring test.

``tests/compaction/test_textscan.py`` checks every rule refold uses against plain ``finditer``
and every ``Caseless`` against plain ``search``.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable, Sequence

from refold._records import dataclass

JOIN = "\n\n"  # no rule's match spans a blank line (condition 2)


@dataclass(frozen=True)
class Rule:
    pattern: re.Pattern[str]
    # found inside every match of ``pattern``: literals (the fastest: ``str.find``), a
    # pattern led by a literal or a rare character, or None (every line)
    trigger: str | tuple[str, ...] | re.Pattern[str] | None
    check: Callable[[str], bool] | None = None  # a match counts only when this holds
    digit_lines: bool = False  # a match may go on over a newline right after a digit
    group: int = 0  # what a match yields
    spaceless: bool = False  # no match holds a space: read lines between spaces (above)


def _occurrences(text: str, trigger: str | tuple[str, ...] | re.Pattern[str]
                 ) -> Callable[[int], tuple[int, int] | None]:
    """``next(pos)``: the first trigger occurrence at or after ``pos`` as (start, end)."""
    if isinstance(trigger, re.Pattern):
        search = trigger.search

        def next_match(pos: int) -> tuple[int, int] | None:
            found = search(text, pos)
            return None if found is None else found.span()
        return next_match
    literals = (trigger,) if isinstance(trigger, str) else trigger
    ahead = [text.find(lit) for lit in literals]  # each one's next occurrence (-1: none)

    def next_literal(pos: int) -> tuple[int, int] | None:
        best = -1
        for i, at in enumerate(ahead):
            if 0 <= at < pos:
                at = ahead[i] = text.find(literals[i], pos)
            if at >= 0 and (best < 0 or at < ahead[best]):
                best = i
        return None if best < 0 else (ahead[best], ahead[best] + len(literals[best]))
    return next_literal


def _last_in_line(text: str, trigger: str | tuple[str, ...] | re.Pattern[str], first: int,
                  end: int) -> int:
    """Where the last trigger match starting in ``[first, end)`` starts (one is at ``first``;
    none holds a newline, so none ends past ``end``)."""
    if isinstance(trigger, str):
        return text.rfind(trigger, first, end)
    if isinstance(trigger, tuple):
        return max(text.rfind(lit, first, end) for lit in trigger)
    search, last = trigger.search, first
    while (found := search(text, last + 1, end + 1)) is not None and found.start() < end:
        last = found.start()  # (up to the newline: what a lookahead there sees stays)
    return last


# A regex trigger on nearly every line costs more, a search per line, than its pattern does
# reading the text whole: once DENSE_LINES trigger lines are found fewer than DENSE_GAP
# characters apart on average (since the text's start), the rest is read whole (whole lines:
# as sound).
DENSE_LINES, DENSE_GAP = 64, 100


def trigger_lines(text: str, trigger: str | tuple[str, ...] | re.Pattern[str] | None,
                  digit_lines: bool = False, spaceless: bool = False
                  ) -> list[tuple[int, int]]:
    """``[start, end)`` ranges of whole lines where ``trigger`` occurs, adjacent ones merged
    (``end`` is a newline's index or ``len(text)``); None: the whole text. ``spaceless``: each
    line's range cut at the spaces around its triggers (the module docstring), none merged."""
    size = len(text)
    if trigger is None:
        return [(0, size)] if size else []
    assert not (spaceless and digit_lines), "a match over two lines holds no space"
    spans: list[tuple[int, int]] = []
    occurrence, pos = _occurrences(text, trigger), 0
    literal, lines = not isinstance(trigger, re.Pattern), 0
    while (found := occurrence(pos)) is not None:
        start = text.rfind("\n", 0, found[0]) + 1
        end = text.find("\n", found[1] - 1)
        end = size if end < 0 else end
        lines += 1
        if not literal and lines >= DENSE_LINES and end < lines * DENSE_GAP:
            end = size
        elif spaceless:
            cut = text.find(" ", _last_in_line(text, trigger, found[0], end), end)
            spans.append((max(start, text.rfind(" ", start, found[0]) + 1),
                          end if cut < 0 else cut))
            pos = end + 1
            continue
        while digit_lines and 0 < end < size and text[end - 1].isdecimal():
            end = text.find("\n", end + 1)  # the match may go on on the next line
            end = size if end < 0 else end
        if spans and spans[-1][1] + 1 >= start:
            spans[-1] = (spans[-1][0], end)
        else:
            spans.append((start, end))
        pos = end + 1
    return spans


class Joined:
    """Texts joined by a blank line; ``find`` maps matches back to the text they are in."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.text = JOIN.join(texts)
        self.starts: list[int] = []
        pos = 0
        for text in texts:
            self.starts.append(pos)
            pos += len(text) + len(JOIN)

    def find(self, rules: Sequence[Rule]) -> list[list[str]]:
        """Per text, what one ``finditer`` over the alternation of the rules' patterns finds:
        leftmost first, the earlier rule winning a tie, overlaps dropped (a single rule: its
        own ``finditer``). The regex engine tries a whole alternation at every position, so
        running its alternatives one by one and merging is several times faster."""
        found: list[tuple[int, int, int, str]] = []
        text = self.text
        for order, rule in enumerate(rules):
            finditer, check, group = rule.pattern.finditer, rule.check, rule.group
            for start, end in trigger_lines(text, rule.trigger, rule.digit_lines,
                                            rule.spaceless):
                found += [(m.start(), order, m.end(), m.group(group))
                          for m in finditer(text, start, end)
                          if check is None or check(m.group(0))]
        if len(rules) > 1:
            found.sort()
        out: list[list[str]] = [[] for _ in self.starts]
        last = -1
        for start, _, stop, raw in found:
            if start >= last:
                out[bisect_right(self.starts, start) - 1].append(raw)
                last = stop
        return out


# the characters ``re.IGNORECASE`` matches to an ASCII letter that ``str.lower`` maps to another
# one (İ to "i̇", two characters): with one of them in a text, the substring test is skipped
_FOLDS = ("\u0130", "\u0131", "\u017f")  # İ ı ſ
_WORD_END = re.compile(r"[\\()\[\]{}?*+|.^$]")
_last_lowered: tuple[str, str] = ("", "")  # the last text lowercased, and its copy


def _lowered(text: str) -> str:
    """``text.lower()``, once for the several patterns one text is tried with."""
    global _last_lowered
    last = _last_lowered
    if last[0] is text:
        return last[1]
    lowered = text.lower()
    _last_lowered = (text, lowered)
    return lowered


class Caseless:
    """``re.compile(rf"\\b(?:{words})\\b|{literals}", re.IGNORECASE)`` whose ``search`` runs
    only when the text can match: one of the words' literal beginnings (``should`` of
    ``should(?:n't)?``) is in the lowercased text, or one of the literals is in the text. Same
    answers as the pattern's own ``search``."""

    def __init__(self, words: str, literals: str = "") -> None:
        self.pattern = re.compile(rf"\b(?:{words})\b|{literals}" if literals
                                  else rf"\b(?:{words})\b", re.IGNORECASE)
        self.words = tuple(dict.fromkeys(_WORD_END.split(w, maxsplit=1)[0].lower()
                                         for w in words.split("|")))
        self.any_word = re.compile("|".join(map(re.escape, self.words)))  # plain literals
        self.literals = tuple(literals.split("|")) if literals else ()
        assert all(w.count("(") == w.count(")") for w in words.split("|")), "a group holds |"
        assert all(self.words) and all(
            not lit.isascii() and not _WORD_END.search(lit) and lit.lower() == lit.upper()
            for lit in self.literals), "literals: not ASCII, caseless, no regex syntax"

    def may_match(self, text: str) -> bool:
        if not text.isascii() and (any(lit in text for lit in self.literals)
                                   or any(ch in text for ch in _FOLDS)):
            return True  # (an ASCII text holds neither)
        return self.any_word.search(_lowered(text)) is not None

    def search(self, text: str) -> re.Match[str] | None:
        if text.isascii():
            return self._search_ascii(text, _lowered(text))
        return self.pattern.search(text) if self.may_match(text) else None

    def starts(self, text: str) -> list[int] | None:
        """Where in ``text`` a match can start, in order (``_search_ascii``: where the
        lowercased copy holds a word's beginning); None for a text that is not ASCII."""
        if not text.isascii():
            return None
        lowered = _lowered(text)
        out: list[int] = []
        for word in self.words:
            at = lowered.find(word)
            while at >= 0:
                out.append(at)
                at = lowered.find(word, at + 1)
        out.sort()
        return out

    def hits(self, text: str) -> list[int] | None:
        """Where in an ASCII text the pattern matches (``match`` at each of ``starts``), in
        order: ``search`` finds the first; None for a text that is not ASCII."""
        starts = self.starts(text)
        if starts is None:
            return None
        match = self.pattern.match
        return [at for at in dict.fromkeys(starts) if match(text, at) is not None]

    def _search_ascii(self, text: str, lowered: str) -> re.Match[str] | None:
        """An ASCII text lowercases in place, and a match can only start where the copy holds
        a word's beginning (the literals are not ASCII): the pattern tried there (``match``,
        one attempt each, leftmost first) finds what its ``search`` finds, without scanning
        the text case-insensitively."""
        first: re.Match[str] | None = None
        for word in self.words:
            at = lowered.find(word)
            while at >= 0 and (first is None or at < first.start()):
                found = self.pattern.match(text, at)
                if found is not None:
                    first = found
                    break
                at = lowered.find(word, at + 1)
        return first


__all__ = ["JOIN", "Caseless", "Joined", "Rule", "trigger_lines"]
