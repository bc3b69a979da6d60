"""The search-query sanitizer: any user text becomes a safe, backend-neutral query plan.

Pure and backend-agnostic; SQLite (FTS5) and PostgreSQL both build their SQL from the
``ParsedQuery`` this returns. Invariants:

- ``parse_query`` never raises on any string except one with nothing in it (empty or blank),
  which is a ``SearchQueryError``. Punctuation-only input (``***``, ``{}``) parses to a query
  with no terms (``is_empty``), which a backend answers with no hits.
- Terms keep only word characters (letters, digits, CJK); everything else separates words.
  A chunk such as ``dotted.names`` or ``hyphen-ated`` stays one term whose words must appear
  as a phrase; ``"quoted text"`` is a phrase; an unterminated quote is ignored.
- ``AND`` / ``OR`` / ``NOT`` (upper case, as in FTS5) are operators only where they make sense:
  a dangling, leading or doubled operator is dropped (``hello AND`` = ``hello``,
  ``a AND OR b`` = ``a OR b``); a query of operators only searches them as words. ``word*``
  keeps prefix matching; ``*word*`` and ``**word**`` are Markdown emphasis, the plain word.
- ``-word`` excludes the word only when it has three or more characters and is not a number:
  ``-q``, ``-rf``, ``-3`` are a pasted command's flags (``git log -3 --oneline``), searched
  as words; ``--flag`` is always the word.
- A query with no word but symbols (emoji, ``€``, ``→``: any non-ASCII symbol) is a
  ``literal`` term each, found as an exact substring by a scan (mode ``"scan"``, over every
  message, not only CJK ones); beside a word, a symbol is ignored as before.
- ``mode`` says which index can answer: ``"fts"`` (word index: no CJK in the query),
  ``"trigram"`` (CJK present, single group, at least one needle of 3+ characters to match on),
  ``"grams"`` (single group whose needles are all shorter than 3 characters, at least one of
  them 1–2 CJK letters: looked up as a token of the CJK unigram+bigram index that
  ``cjk_grams`` feeds, which no trigram index can answer) or ``"scan"`` (anything else with
  CJK, e.g. OR-groups: an exact substring scan of the content, newest first, under a cap).
- ``cjk_grams(text)`` yields every CJK letter and every adjacent pair of CJK letters, so each
  1–2 letter CJK substring of ``text`` is one of its tokens: lookups through it are exact.
"""

from __future__ import annotations

import functools
import itertools
import re
import string
import unicodedata
from bisect import bisect_right
from typing import TYPE_CHECKING, Any, Literal, cast

from refold._records import dataclass, field
from refold.errors import SearchQueryError

if TYPE_CHECKING:
    from collections.abc import Iterator

    from refold.search.natural import NaturalPlan

QueryMode = Literal["natural", "fts", "trigram", "grams", "scan"]

MAX_QUERY_CHARS = 1000
MAX_TERMS = 32
TRIGRAM_MIN_CHARS = 3

_CJK_RANGES = (
    (0x1100, 0x11FF),    # Hangul Jamo
    (0x2E80, 0x2FDF),    # CJK radicals, Kangxi radicals
    (0x3040, 0x30FF),    # Hiragana, Katakana
    (0x3100, 0x312F),    # Bopomofo
    (0x3130, 0x318F),    # Hangul compatibility Jamo
    (0x31F0, 0x31FF),    # Katakana phonetic extensions
    (0x3400, 0x4DBF),    # CJK extension A
    (0x4E00, 0x9FFF),    # CJK unified ideographs
    (0xA960, 0xA97F),    # Hangul Jamo extended A
    (0xAC00, 0xD7AF),    # Hangul syllables
    (0xF900, 0xFAFF),    # CJK compatibility ideographs
    (0xFF66, 0xFF9D),    # half-width Katakana
    (0x20000, 0x3134F),  # CJK extensions B–G
)
CJK_CLASS = "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in _CJK_RANGES)  # inside [...]
_WORD = re.compile(r"[^\W_]+")
_OPERATORS = frozenset({"AND", "OR", "NOT"})


class LazyPattern:
    """A regular expression compiled on first use. The CJK character classes cost several
    milliseconds to compile, which every command importing search would pay at start-up
    (issue 14: ``refold search`` on a small archive in under 100 ms); an ASCII query never
    needs them."""

    __slots__ = ("_compiled", "pattern")

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self._compiled: re.Pattern[str] | None = None

    def __getattr__(self, name: str) -> Any:  # search, match, findall, split, finditer, sub
        compiled = self._compiled
        if compiled is None:
            compiled = self._compiled = re.compile(self.pattern)
        return getattr(compiled, name)


# One pattern for stored texts (the write and indexing paths) and long ones: compiling the
# class costs ~1-2 ms (the compiler walks each of its ~40k code points), once a process. A
# query's words, short, are read in Python instead (``cjk_split``, ``has_cjk``): a fresh
# process's first CJK search (``refold search``) pays no compile.
_CJK = LazyPattern("([" + CJK_CLASS + "]+)")
_FIRST_CJK = _CJK_RANGES[0][0]
_CJK_EDGES = tuple(edge for low, high in _CJK_RANGES for edge in (low, high + 1))
SHORT_TEXT = 200  # characters: up to this, CJK runs are found in Python (``cjk_split``)


def _cjk_code(code: int) -> bool:
    return code >= _FIRST_CJK and bisect_right(_CJK_EDGES, code) & 1 == 1


def is_cjk_char(char: str) -> bool:
    """True for Han, Kana, Hangul and Bopomofo characters (scripts written without spaces)."""
    return len(char) == 1 and _cjk_code(ord(char))


def text_has_cjk(text: str) -> bool:
    """``has_cjk`` for a stored message's text (the write path): the pattern, compiled once a
    process, tests any non-ASCII text several times faster than ``has_cjk``'s Python."""
    return not text.isascii() and _CJK.search(text) is not None


def has_cjk(text: str) -> bool:
    """True when ``text`` (a query's word) contains at least one CJK character."""
    if text.isascii():
        return False
    if len(text) <= SHORT_TEXT:
        return any(map(_cjk_code, map(ord, text)))
    return _CJK.search(text) is not None


def cjk_split(text: str) -> list[str]:
    """``text`` cut around its CJK runs, as ``re.split`` with the run kept: the text before
    the first run, the run, the text up to the next one ... and the text after the last (so
    ``[1::2]`` are the runs, ``[0::2]`` the rest)."""
    if text.isascii():
        return [text]
    if len(text) > SHORT_TEXT:
        return cast("list[str]", _CJK.split(text))
    parts: list[str] = []
    start, run = 0, -1  # where the current stretch began; where the current run began
    for index, code in enumerate(map(ord, text)):
        if _cjk_code(code):
            if run < 0:
                parts.append(text[start:index])
                run = index
        elif run >= 0:
            parts.append(text[run:index])
            start, run = index, -1
    if run >= 0:
        parts += (text[run:], "")
    else:
        parts.append(text[start:])
    return parts


def cjk_runs(text: str) -> list[str]:
    """The CJK runs of ``text``, in order."""
    return cjk_split(text)[1::2]


def _gram_letter(char: str) -> bool:
    # Letters and digits only: what a unicode61 tokenizer keeps inside a token.
    return char.isalnum()


def cjk_grams(text: str) -> str:
    """Space-separated unigrams and bigrams of the CJK letters in ``text`` (each once): a
    stored message's, on the indexing path, so its runs come from the pattern."""
    grams: dict[str, None] = {}
    for run in _CJK.findall(text) if not text.isascii() else ():
        for index, char in enumerate(run):
            if not _gram_letter(char):
                continue
            grams[char] = None
            if index + 1 < len(run) and _gram_letter(run[index + 1]):
                grams[run[index:index + 2]] = None
    return " ".join(grams)


def is_gram_needle(needle: str) -> bool:
    """True for 1–2 CJK letters: exactly one token of ``cjk_grams``."""
    return 1 <= len(needle) <= 2 and all(is_cjk_char(c) and _gram_letter(c) for c in needle)


@dataclass(frozen=True)
class Term:
    """One search term: its words (a phrase when several), prefix and negation flags."""

    words: tuple[str, ...]
    prefix: bool = False
    negated: bool = False
    quoted: bool = False
    literal: bool = False  # symbols, not a word: an exact substring (see the module doc)
    # a chunk's text from its first word to its last as typed (``docker-compose.yml``), for a
    # term of several words; "" otherwise (``natural.glued_chunks`` looks for it in CJK text)
    raw: str = field(default="", compare=False)

    @property
    def cjk(self) -> bool:
        return any(has_cjk(w) for w in self.words)

    def needles(self) -> list[str]:
        """Substrings that must all occur for this term (exact-substring backends)."""
        if self.quoted:
            return [" ".join(self.words)]
        return list(self.words)

    def fts5(self) -> str:
        """The term as an FTS5 string: quoted (so no input is ever FTS5 syntax), maybe prefix.

        Porter stems the query prefix too, and turns a final "y" into "i" ("deploy" → "deploi"),
        which would miss "deployment" (stem "deploy"); a prefix ending in "y" therefore drops
        that letter ("deplo*"), slightly wider but never missing a word that starts with it.
        """
        words = list(self.words)
        if self.prefix and len(words[-1]) > 2 and words[-1][-1] in "yY":
            words[-1] = words[-1][:-1]
        return '"' + " ".join(words) + '"' + ("*" if self.prefix else "")


@dataclass(frozen=True)
class ParsedQuery:
    """OR of AND-groups of terms; each group has at least one positive (non-negated) term."""

    raw: str
    groups: tuple[tuple[Term, ...], ...]
    natural: NaturalPlan | None = None  # set for a sentence-like query (see refold.search.natural)
    # a one-word query's plan that also finds the word glued inside CJK text; the backend uses
    # it (as ``natural``) when the archive holds the word that way (``natural.glued_alone``)
    glued: NaturalPlan | None = None
    # the user wrote query syntax (quotes, AND/OR/NOT, -word, word*): it means what it says,
    # so a vector search may only add messages that satisfy it (``refold.search.vectors``)
    explicit: bool = False

    @property
    def is_empty(self) -> bool:
        return not self.groups

    @property
    def terms(self) -> list[Term]:
        return [t for g in self.groups for t in g]

    @property
    def has_cjk(self) -> bool:
        return any(t.cjk for t in self.terms)

    @property
    def literal(self) -> bool:
        """True for a query of symbols only (a substring scan over every message)."""
        return any(t.literal for t in self.terms)

    @property
    def mode(self) -> QueryMode:
        if self.natural is not None:
            return "natural"
        if self.literal:
            return "scan"
        if not self.has_cjk:
            return "fts"
        if self.trigram_plan() is not None:
            return "trigram"
        return "grams" if self.gram_plan() is not None else "scan"

    def highlight_needles(self) -> list[str]:
        """Positive needles, longest first (for building snippets); a prefix term's last one
        ends in ``*`` (``needle_pattern``: the word may run on)."""
        found = {n for t in self.terms if not t.negated for n in t.needles()[:-1]}
        found |= {t.needles()[-1] + ("*" if t.prefix else "")
                  for t in self.terms if not t.negated}
        if self.natural is not None:
            found = set(self.natural.needles())
        return sorted(found, key=lambda n: (-len(n), n))

    def fts5_expression(self) -> str:
        """An FTS5 MATCH expression for a word index (porter/unicode61 or similar)."""
        rendered = []
        for group in self.groups:
            positive = " AND ".join(t.fts5() for t in group if not t.negated)
            negative = "".join(f" NOT {t.fts5()}" for t in group if t.negated)
            rendered.append(f"(({positive}){negative})" if negative else f"({positive})")
        return " OR ".join(rendered)

    def substring_groups(self) -> list[tuple[list[str], list[str]]]:
        """Per OR-group: (needles that must occur, needles that must not), case-insensitive."""
        out = []
        for group in self.groups:
            must = [n for t in group if not t.negated for n in t.needles()]
            must_not = [" ".join(t.words) for t in group if t.negated]
            out.append((must, must_not))
        return out

    def trigram_plan(self) -> TrigramPlan | None:
        """How a trigram index answers this query, or None when it cannot (use a scan)."""
        if len(self.groups) != 1:
            return None
        must, must_not = self.substring_groups()[0]
        long_needles = [n for n in must if len(n) >= TRIGRAM_MIN_CHARS]
        if not long_needles:
            return None
        short = [n for n in must if len(n) < TRIGRAM_MIN_CHARS]
        terms = tuple('"' + n + '"' for n in long_needles)
        return TrigramPlan(match=" AND ".join(terms), also_contains=short, excludes=must_not,
                           terms=terms)

    def gram_plan(self) -> TrigramPlan | None:
        """How the CJK gram index answers a query of short needles, or None (use a scan).

        ``match`` ANDs the 1–2 letter CJK needles as gram tokens; ``also_contains`` holds every
        positive needle, to be checked as a substring (cheap on the few candidate rows, and it
        keeps the answer exact even if the index were stale).
        """
        if len(self.groups) != 1:
            return None
        must, must_not = self.substring_groups()[0]
        tokens = [n for n in must if is_gram_needle(n)]
        if not tokens or any(len(n) >= TRIGRAM_MIN_CHARS for n in must):
            return None
        terms = tuple('"' + n + '"' for n in dict.fromkeys(tokens))
        return TrigramPlan(match=" AND ".join(terms), also_contains=must, excludes=must_not,
                           terms=terms)


@dataclass(frozen=True)
class TrigramPlan:
    """An index MATCH (trigram or gram tokens), then substring checks for the rest."""

    match: str
    also_contains: list[str]
    excludes: list[str]
    terms: tuple[str, ...] = ()  # the single-term MATCH strings that ``match`` ANDs


def _tokens(text: str) -> list[Term | str]:
    """Split raw text into terms and operator strings; quotes make phrases."""
    out: list[Term | str] = []
    pos = 0
    while pos < len(text):
        char = text[pos]
        if char.isspace():
            pos += 1
            continue
        if char == '"':
            end = text.find('"', pos + 1)
            if end == -1:  # unterminated: the quote is just noise
                pos += 1
                continue
            words = tuple(_WORD.findall(text[pos + 1:end]))
            if words:
                prefix = text[end + 1:end + 2] == "*"
                out.append(Term(words, prefix=prefix, quoted=True))
            pos = end + 1
            continue
        end = pos
        while end < len(text) and not text[end].isspace() and text[end] != '"':
            end += 1
        out.append(_chunk_token(text[pos:end]))
        pos = end
    return [t for t in out if t != ""]


_EMPHASIS = re.compile(r"[^\w]*\*")


NEGATED_MIN_CHARS = 3  # "-word" excludes from this length; "-q", "-rf" are flags


def _chunk_token(chunk: str) -> Term | str:
    if chunk in _OPERATORS:
        return chunk
    found = list(_WORD.finditer(chunk))
    if not found:
        return _literal(chunk)
    words = tuple(m.group() for m in found)
    raw = chunk[found[0].start():found[-1].end()] if len(found) > 1 else ""
    # "word*" is a prefix; "*word*" or "**word**" is Markdown emphasis (pasted from an agent's
    # answer or a note), a plain word: an asterisk before the first letter says which
    prefix = "*" in chunk and bool(re.search(r"[^\W_]\*+[^\w]*$", chunk)) \
        and not _EMPHASIS.match(chunk)
    # "-word" excludes the word (a power-user form, as in web search); "a-b" stays a phrase;
    # "-q", "-rf", "-3" are flags of a pasted command ("git log -3 --oneline"), plain words
    word = _WORD.match(chunk, 1) if len(chunk) > 1 and chunk[0] == "-" else None
    negated = word is not None and len(word.group()) >= NEGATED_MIN_CHARS \
        and not word.group().isdigit()
    return Term(words, prefix=prefix, negated=negated, raw=raw)


def _literal(chunk: str) -> Term | str:
    """A chunk without a word: its symbols as an exact substring when it has a non-ASCII one
    (``🎉``, ``€``, ``→``); ASCII punctuation alone (``***``, ``{}``) is nothing."""
    text = chunk.strip(string.punctuation)
    if any(not c.isascii() and unicodedata.category(c)[0] == "S" for c in text):
        return Term((text,), literal=True)
    return ""


def _group(tokens: list[Term | str]) -> tuple[tuple[Term, ...], ...]:
    groups: list[list[Term]] = [[]]
    negate_next = False
    for token in tokens:
        has_positive = any(not t.negated for t in groups[-1])
        if token == "OR":
            if has_positive:
                groups.append([])
            negate_next = False
        elif token == "NOT":
            negate_next = has_positive
        elif isinstance(token, Term):
            if negate_next:
                token = Term(token.words, token.prefix, True, token.quoted)
            groups[-1].append(token)
            negate_next = False
    return tuple(tuple(g) for g in groups if any(not t.negated for t in g))


def parse_query(text: str) -> ParsedQuery:
    """Sanitize ``text`` into a ``ParsedQuery``; only an empty query raises (SearchQueryError)."""
    if not isinstance(text, str):
        raise SearchQueryError(f"a search query must be text, not {type(text).__name__}")
    if not text.strip():
        raise SearchQueryError("the search query is empty", hint="give at least one word")
    # Lone surrogates (from undecodable input) cannot reach a database driver.
    # A NUL ends FTS5's strings early ("unterminated string") and PostgreSQL refuses it in
    # text: it separates words, as it can be no part of one.
    clean = text[:MAX_QUERY_CHARS].encode("utf-8", "replace").decode("utf-8").replace(
        "\x00", " ")
    tokens = _tokens(clean)
    if any(isinstance(t, Term) and not t.literal for t in tokens):
        tokens = [t for t in tokens if not (isinstance(t, Term) and t.literal)]
    elif any(isinstance(t, Term) for t in tokens):  # symbols only: found as typed
        literal = [t for t in tokens if isinstance(t, Term)][:MAX_TERMS]
        return ParsedQuery(raw=text, groups=(tuple(literal),))
    else:  # operators only ("AND", "OR NOT"): they are the words asked for
        tokens = [Term((t,)) for t in tokens if isinstance(t, str)]
    kept: list[Term | str] = []
    count = 0
    for token in tokens:
        if isinstance(token, Term):
            count += 1
            if count > MAX_TERMS:
                break
        kept.append(token)
    sentence = quoted_sentence(clean, kept)
    if sentence is not None or not is_explicit(kept):
        from refold.search.dates import query_days
        from refold.search.natural import natural_plan  # it builds on Term, defined here

        terms = sentence if sentence is not None else [t for t in kept if isinstance(t, Term)]
        plan = natural_plan(terms + _width_variants(clean, terms), query_days(clean))
        if plan is not None:
            if plan.single is not None:  # one content term: its exact (AND) form answers it
                from refold.search.natural import glued_alone

                return ParsedQuery(raw=text, groups=((plan.single,),), glued=glued_alone(plan))
            return ParsedQuery(raw=text, groups=_group(kept), natural=plan)
    return ParsedQuery(raw=text, groups=_group(kept),
                       explicit=sentence is None and is_explicit(kept))


def _width_variants(text: str, terms: list[Term]) -> list[Term]:
    """The terms of ``text`` in Unicode's compatibility form (NFKC) that its own terms lack:
    full-width letters and digits as an input method types them (``ＡＰＩ``, ``５４１０``),
    half-width katakana (``ｶﾀｶﾅ``), ligatures. Agents write ``API`` and ``5410``; the index
    keeps each message as written, so a question searches both forms (its own, for a message
    written full-width, and the folded one). Only for queries read as sentences: explicit syntax
    is searched as typed."""
    folded = unicodedata.normalize("NFKC", text)
    if folded == text:
        return []
    have = {t.words for t in terms}
    out: list[Term] = []
    for token in _tokens(folded[:MAX_QUERY_CHARS]):
        if isinstance(token, Term) and not token.negated and not token.literal \
                and token.words not in have:
            have.add(token.words)
            out.append(Term(token.words, token.prefix, False, token.quoted, raw=token.raw))
    return out[:MAX_TERMS]


_SENTENCE_END = re.compile(r"[?？!！。]\s*$")
QUOTED_PHRASE_WORDS = 4  # a quoted span this long or shorter, inside a sentence, stays a phrase


def quoted_sentence(text: str, tokens: list[Term | str]) -> list[Term] | None:
    """The terms of a sentence that only quotes (no AND/OR/NOT, -word or word*), or None.

    People quote titles inside questions (``I watched "Taxi Driver", what is it about?``) and
    paste whole questions in quotes; read as syntax, every quoted span would be required and
    the question would find nothing. Quotes alone stay exact syntax (``"disk full"``, or with
    one more word); a quoted span with at least two plain words around it gives its words as terms, and
    (up to four words) itself as a phrase term too; a query that is one
    quoted span ending like a sentence (``?``, ``!``, ``。``) is read as that sentence.
    """
    terms = [t for t in tokens if isinstance(t, Term)]
    if not any(t.quoted for t in terms) or any(
            isinstance(t, str) or t.prefix or t.negated for t in tokens):
        return None
    plain = [t for t in terms if not t.quoted]
    if len(plain) < 2:
        inner = text.strip().strip('"')
        if plain or len(terms) != 1 or '"' in inner or not _SENTENCE_END.search(inner):
            return None
    out: list[Term] = []
    for term in terms:
        if term.quoted and len(term.words) > 1 and len(term.words) <= QUOTED_PHRASE_WORDS \
                and plain:
            out.append(Term(term.words))  # the phrase, and its words below
        out.extend(Term((w,)) for w in term.words)
    return out


def is_explicit(tokens: list[Term | str]) -> bool:
    """True when the user wrote query syntax: quotes, AND/OR/NOT between words, -word or
    word*. A dangling or leading operator is no syntax (``hello AND`` is ``hello``, read as a
    sentence): it made a natural query strict, and vector search found nothing for it."""
    for i, token in enumerate(tokens):
        if isinstance(token, str):
            before = any(isinstance(t, Term) for t in tokens[:i])
            after = next((t for t in tokens[i + 1:] if not isinstance(t, str)), None)
            if before and after is not None:
                return True
        elif token.quoted or token.prefix or token.negated:
            return True
    return False


_ASCII_EDGE = "0-9A-Za-z"
# what may follow a needle's last English word: its inflections ("fix" finds "fixes", a stem
# such as "migrat" finds "migration"), never any word it merely begins ("fixture", "timeout")
_INFLECTION = "(?:e|es|s|ed|d|ing|ion|ions|er|ers|ment|ments)?"


@functools.lru_cache(maxsize=1024)
def needle_pattern(needle: str) -> re.Pattern[str]:
    """Where ``needle`` (lower case, as ``highlight_needles`` gives it) occurs in lower-cased
    text, as the word index would match it: the words of a multi-word needle with any
    non-letters between them (``get user settings cache`` is in ``get_user_settings_cache``),
    an ASCII edge only on a word boundary (``fix`` is not in ``prefix``, ``log`` not in
    ``changelog``, ``time`` not in ``statement_timeout``, ``12`` not in ``#1234``) and a final
    English word with its inflections; a trailing ``*`` (a prefix term) lets the word run on.
    CJK needles are exact substrings, as their index finds them."""
    prefix = needle.endswith("*") and len(needle) > 1
    words = needle[:-1].split() if prefix else needle.split()
    if not words:
        return re.compile(re.escape(needle))
    body = r"[\W_]+".join(re.escape(w) for w in words)
    if words[0][0].isascii() and words[0][0].isalnum():
        body = f"(?<![{_ASCII_EDGE}])" + body
    last = words[-1][-1]
    if last.isascii() and last.isalnum():
        if prefix:
            body += f"[{_ASCII_EDGE}]*"
        else:
            body += (_INFLECTION if last.isalpha() else "") + f"(?![{_ASCII_EDGE}])"
    return re.compile(body)


def make_snippet(text: str, needles: list[str], *, width: int = 120) -> str:
    """A ~``width``-character excerpt around the matches, matches wrapped in ``[...]``.

    The excerpt is the window holding the most different needles (then the most matches; the
    earliest on a tie): for a question, the line that answers it rather than the first place
    one of its words occurs. Matching is case-insensitive; without any match the start of the
    text is returned.
    """
    lowered = text.lower()
    if len(lowered) != len(text):  # a few characters change length when lowered
        lowered = text
    spans = _match_spans(lowered, [n.lower() for n in needles if n])
    if not spans:
        return _clip(text, 0, width)
    best = _best_window(spans, width)
    start = max(0, best - width // 3)
    end = min(len(text), start + width)
    best_end = max(hi for lo, hi, _ in spans if lo == best)
    start, end = _word_edges(text, start, end, best, best_end)
    # the matches inside the excerpt; overlapping matches are one ("タイ", "イム", "ムア"…,
    # the bigram pieces of a word, show "[タイムアウト]"), touching matches of different needles
    # are joined ("[デプ][ロイ]" reads as "[デプロイ]"), repeats of one needle stay apart
    shown: list[list[int]] = []  # [start, end, needle of the last part]
    for lo, hi, needle in spans:
        if lo < start or hi > end:
            continue
        if shown and (lo < shown[-1][1] or (lo == shown[-1][1] and needle != shown[-1][2])):
            shown[-1][1:] = [max(hi, shown[-1][1]), needle]
        else:
            shown.append([lo, hi, needle])
    pieces: list[str] = ["…" if start > 0 else ""]
    cursor = start
    for lo, hi, _ in shown:
        pieces.append(text[cursor:lo] + "[" + text[lo:hi] + "]")
        cursor = hi
    tail = text[cursor:end]
    pieces.append(tail.rstrip() + "…" if end < len(text) else tail)
    excerpt = "".join(pieces).replace("\n", " ")
    return "…" + excerpt[1:].lstrip() if start > 0 else excerpt


def holds_any(text: str, needles: list[str]) -> bool:
    """Does ``text`` hold one of ``needles`` as the index matches a term (what a snippet would
    mark)?"""
    lowered = text.lower()
    if len(lowered) != len(text):  # (as make_snippet: a few characters change length)
        lowered = text
    return bool(_match_spans(lowered, [n.lower() for n in needles if n]))


SNAP = 24  # characters an excerpt's edge may move to fall between words


def _word_edges(text: str, start: int, end: int, keep: int, keep_end: int
                ) -> tuple[int, int]:
    """``[start, end)`` moved, by at most ``SNAP`` characters, so neither edge cuts a word
    ("…oning and" becomes "…and"); the match ``[keep, keep_end)`` stays as inside as it was.
    Text without spaces near an edge (Chinese, Japanese, a long token) keeps that edge."""
    if 0 < start < len(text) and not text[start - 1].isspace() and not text[start].isspace():
        space = next((i for i in range(start, min(start + SNAP, keep)) if text[i].isspace()),
                     None)
        if space is not None:
            start = space + 1
    if start < end < len(text) and not text[end - 1].isspace() and not text[end].isspace():
        space = next((i for i in range(end - 1, max(end - SNAP, keep_end, start) - 1, -1)
                      if text[i].isspace()), None)
        if space is not None:
            end = space
    return start, end


MAX_SNIPPET_SPANS = 2000  # matches of each needle weighed (a long tool output): a rare
# needle's matches are all seen however often a common one occurs


def _best_window(spans: list[tuple[int, int, int]], width: int) -> int:
    """Where the best window's first match starts: the window opening ``width // 3`` before a
    match and ``width`` long that holds the most different needles, then the most matches."""
    reach = width - width // 3  # how far after its first match a window goes
    held: dict[int, int] = {}  # needle -> matches inside the window
    best, best_key, right = spans[0][0], (0, 0), 0
    for left, (lo, _, _) in enumerate(spans):
        while right < len(spans) and spans[right][1] <= lo + reach:
            held[spans[right][2]] = held.get(spans[right][2], 0) + 1
            right += 1
        key = (len(held), right - left)
        if key > best_key:
            best, best_key = lo, key
        if right > left:  # the window moves past this match
            needle = spans[left][2]
            held[needle] -= 1
            if not held[needle]:
                del held[needle]
        else:
            right = left + 1
    return best


def _match_spans(lowered: str, needles: list[str]) -> list[tuple[int, int, int]]:
    """(start, end, which needle) of every match, in text order, found as the index matches
    a term (``needle_pattern``: whole words, a phrase's words with anything between them).
    Matches of different needles may overlap (the snippet shows them as one); needles are
    numbered longest first, then alphabetically, so the result never depends on the order of
    a set (``PYTHONHASHSEED``)."""
    spans: list[tuple[int, int, int]] = []
    for number, needle in enumerate(sorted(set(needles), key=lambda n: (-len(n), n))):
        if needle.isascii() and needle.isalnum():
            spans.extend((start, end, number) for start, end in itertools.islice(
                word_matches(lowered, needle), MAX_SNIPPET_SPANS))
            continue
        found = needle_pattern(needle).finditer(lowered)
        spans.extend((m.start(), m.end(), number)
                     for m in itertools.islice(found, MAX_SNIPPET_SPANS) if m.end() > m.start())
    return sorted(spans)


_ASCII_ALNUM = frozenset(string.ascii_letters + string.digits)
_INFLECTIONS = frozenset(_INFLECTION[3:-2].split("|")) | {""}


def word_matches(lowered: str, word: str) -> Iterator[tuple[int, int]]:
    """``needle_pattern(word).finditer(lowered)``'s spans for a needle of ASCII letters and
    digits, found without compiling a pattern (a new process's first search compiled one per
    needle, ~0.1 ms each): a match starts on an ASCII word edge and runs to the end of the
    ASCII letters and digits there, which after the word must be nothing or, when the word
    ends in a letter, one of its inflections."""
    inflected = word[-1].isalpha()
    size, end_of_text = len(word), len(lowered)
    start = lowered.find(word)
    while start >= 0:
        if start and lowered[start - 1] in _ASCII_ALNUM:
            start = lowered.find(word, start + 1)
            continue
        end = start + size
        while end < end_of_text and lowered[end] in _ASCII_ALNUM:
            end += 1
        tail = lowered[start + size:end]
        if not tail or (inflected and tail in _INFLECTIONS):
            yield start, end
            start = lowered.find(word, end)
        else:
            start = lowered.find(word, start + 1)


def _clip(text: str, start: int, width: int) -> str:
    excerpt = text[start:start + width]
    return excerpt.replace("\n", " ") + ("…" if len(text) > start + width else "")
