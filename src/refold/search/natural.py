"""Natural-language queries: a sentence becomes weighted terms, ORed and ranked by BM25.

People and agents ask "When did Caroline go to the support group?"; ANDing every word finds
nothing, because no message holds them all. A query without explicit syntax (no quotes,
AND/OR/NOT, ``-word`` or ``word*``; see ``refold.search.query.is_explicit``) goes through here:

- stop words (``refold.search.stopwords``, English/Chinese/Japanese/Korean) are dropped;
- words of other scripts become word-index terms (the backend stems them: FTS5 porter on SQLite,
  the Porter configuration on PostgreSQL); a chunk such as ``dotted.names`` stays a phrase;
- a CJK run is cut at stop words; each piece of 1–4 characters is one exact-substring term
  (1–2 characters answered by the CJK gram index, 3+ by trigrams, as for explicit queries), a
  longer piece becomes its overlapping bigrams; a Hangul word loses its particle (``검색을``).
- digits glued to CJK (``5月6号``, ``2023年5月4日``, ``6号``, ``2일``) are one exact term, the
  whole span; its bare numbers and the unit letter after each (月, 号, 日; a Korean particle
  after it, the 에 of ``2일에``) are no terms of their own: alone they match any message with
  a 5 or a 月 and outranked the words of the question (``short_span``: two characters).
- a plain word of 3+ ASCII letters or digits (``glued``) is also looked for where Chinese,
  Japanese or Korean text holds it without spaces (``用pytest跑``, ``ＡＰＩキー``, ``API를``),
  which the word index keeps as one token with its neighbours (``glued_words``, ``glued_in``).
  So is a chunk of several words as typed (``docker-compose.yml``, ``OPENAI_API_KEY``:
  ``chunks``, ``glued_chunks``), whose phrase the word index misses when its first or last word
  is glued (``docker-compose.yml读取它``).
- ``pairs`` are adjacent content words of the query, for the phrase boost.
- ``days`` are the calendar days it names ("on May 2nd", "5月2号"; ``refold.search.dates``):
  one more term each, whose postings are the messages created that day.

The backends OR the terms, weight each by its inverse document frequency (BM25), and boost a
message holding every term (and, more, one holding an adjacent pair as a phrase).
Invariant: a sentence whose only content is one term is answered exactly like that term alone
(``NaturalPlan.single``), so a one-word or one-CJK-word query keeps its exact semantics.
"""

from __future__ import annotations

import itertools
import unicodedata

from refold._records import dataclass
from refold.search.dates import Day
from refold.search.query import (
    CJK_CLASS,
    LazyPattern,
    Term,
    cjk_split,
    has_cjk,
    is_cjk_char,
    is_gram_needle,
)
from refold.search.stopwords import (
    KOREAN_PARTICLES,
    is_stop_word,
    split_cjk_stops,
    strip_korean_particle,
)

MAX_NATURAL_TERMS = 24
LONG_PIECE = 4  # a lone CJK word up to this long is searched exactly, as typed
SENTENCE_PIECE = 2  # inside a sentence, CJK pieces longer than this become their bigrams
SENTENCE_UNIGRAMS = False  # ... and their characters: off, 3x the CPU of a CJK sentence query
# (measured at 20k messages) for a gain on the dev split that did not hold on the test split
_JOINED = LazyPattern(f"(?:[0-9A-Za-z]+[{CJK_CLASS}])+[0-9A-Za-z]*")
_HANGUL = ((0x1100, 0x11FF), (0x3130, 0x318F), (0xA960, 0xA97F), (0xAC00, 0xD7AF))
_HAN_OR_KATAKANA = ((0x3400, 0x9FFF), (0xF900, 0xFAFF), (0x30A0, 0x30FF), (0x20000, 0x3134F))


def _holds(text: str, ranges: tuple[tuple[int, int], ...]) -> bool:
    """Does ``text`` (a query's word: short) hold a character of ``ranges``? (A test in
    Python: a regular expression of these classes costs ~1 ms to compile, in every fresh
    process that plans a CJK question.)"""
    return any(low <= code <= high for code in map(ord, text) for low, high in ranges)


def _ascii_alnum(text: str) -> bool:
    return any(c.isascii() and c.isalnum() for c in text)


@dataclass(frozen=True)
class NaturalPlan:
    """The weighted terms of a sentence-like query (weights come from the index: IDF)."""

    words: tuple[Term, ...]  # word-index terms (no CJK), stop words removed
    cjk: tuple[str, ...]  # exact CJK substrings, each one term
    pairs: tuple[tuple[str, str], ...] = ()  # adjacent content words (phrase boost)
    single: Term | None = None  # the only content term, when there is just one
    days: tuple[Day, ...] = ()  # calendar days the query names (refold.search.dates)
    glued: tuple[str, ...] = ()  # words also looked for glued inside CJK text (glued_words)
    # (term, chunk as typed) of a term of several words also looked for glued inside CJK text,
    # the term as ``" ".join(words)``: ("docker compose yml", "docker-compose.yml")
    chunks: tuple[tuple[str, str], ...] = ()

    def needles(self) -> list[str]:
        """Substrings to highlight in snippets, longest first."""
        found = {" ".join(t.words) for t in self.words} | set(self.cjk)
        return sorted(found, key=lambda n: (-len(n), n))

    @property
    def size(self) -> int:
        return len(self.words) + len(self.cjk)


def _cjk_terms(run: str, typed_word: bool = False) -> list[str]:
    if _holds(run, _HANGUL):
        stem = strip_korean_particle(run)
        return [] if is_stop_word(stem) or is_stop_word(run) else [stem]
    if typed_word and len(run) <= LONG_PIECE and not is_stop_word(run):
        return [run]  # a short word the user typed between spaces: searched as typed
    out: list[str] = []
    for piece in split_cjk_stops(run):
        if is_stop_word(piece):
            continue
        if len(piece) <= SENTENCE_PIECE:
            out.append(piece)
        else:  # a message holding the piece holds each of its bigrams: recall is kept
            out.extend(piece[i:i + 2] for i in range(len(piece) - 1))
            if SENTENCE_UNIGRAMS:  # and its characters: "帮助" still finds "帮了"
                out.extend(c for c in piece if not is_stop_word(c))
    return out


def _split(term: Term) -> tuple[list[Term], list[str]]:
    """A parsed term's word-index terms and CJK terms (a word mixing scripts is split)."""
    if not term.cjk:
        if len(term.words) > 1 and is_stop_word("'".join(term.words)):
            return [], []  # a contraction the query split at its apostrophe: don't, isn't
        content = [w for w in term.words if not is_stop_word(w)]
        return ([term] if content else []), []
    words: list[Term] = []
    cjk: list[str] = []
    for word in term.words:
        # "5月6号", "iPhone15发布", "6号", "2일": letters and digits joined to CJK are one token
        # in the word index and no gram; the joined span is an exact substring (3+ characters:
        # a trigram one; 2, ``short_span``: its CJK letter's gram, then the text)
        joined = [m for m in _JOINED.finditer(word)
                  if len(m.group(0)) >= 3 or short_span(m.group(0))] if _ascii_alnum(word) else []
        start, after_number = 0, False
        for part in cjk_split(word):
            end = start + len(part)
            inside = any(m.start() <= start and end <= m.end() for m in joined)
            if part and has_cjk(part):
                if after_number:  # 月, 号, 日 of "5月6号": the joined span holds them
                    part = part[1:]  # (and the particle of "2일에" is no term of its own)
                    part = "" if part in KOREAN_PARTICLES else part
                cjk.extend(_cjk_terms(part, typed_word=len(term.words) == 1 and part == word)
                           if part else [])
            elif part and not is_stop_word(part) and not (inside and part.isdigit()):
                words.append(Term((part,)))  # a bare "5" of a date would match any 5
            after_number = inside and part.isdigit()
            start = end
        cjk.extend(m.group(0) for m in joined)
    return words, cjk


def short_span(piece: str) -> bool:
    """A CJK term of two characters, a letter or digit then a CJK letter (``6号``, ``2일``,
    ``B站``): no trigram index finds two characters, so the backends look up the CJK letter's
    gram (``is_gram_needle``) and test the text for the span, not preceded by another letter
    or digit (``16号`` holds no ``6号``: ``SHORT_SPAN_EDGE``)."""
    return len(piece) == 2 and piece[0].isascii() and piece[0].isalnum() \
        and is_gram_needle(piece[1])


def _one_cjk_word(word: str) -> bool:
    """A lone CJK token read as one word: short, mixing scripts (本v2, 版本v2发布), or
    kana/Hangul only (no sentence to cut)."""
    if not has_cjk(word):
        return False
    parts = cjk_split(word)
    if "".join(parts[0::2]):  # mixed scripts: one word while its CJK is word-long in all
        # (a question with a term glued in, 导出的CSV有哪些列, is a sentence: as one exact
        # term it found nothing)
        return sum(len(run) for run in parts[1::2]) <= LONG_PIECE
    return len(word) <= LONG_PIECE or not _holds(word, _HAN_OR_KATAKANA) \
        or _holds(word, _HANGUL)


def natural_plan(terms: list[Term], days: tuple[Day, ...] = ()) -> NaturalPlan | None:
    """The plan for a query of plain terms, or None when every term is a stop word (then the
    query is answered as typed, so "the" still finds "the"). ``days`` become terms too."""
    if not days and len(terms) == 1 and len(terms[0].words) == 1 \
            and _one_cjk_word(terms[0].words[0]):
        return None  # one CJK word (目的地, こんにちは): exact, never cut at a stop character
        # (a date, 4月1日, 2025年4月1日的消息, is a day and what is around it, as in English)
    words: dict[str, Term] = {}
    cjk: dict[str, None] = {}
    order: list[str] = []  # content words in query order (for pairs); "" breaks adjacency
    for term in terms:
        more_words, more_cjk = _split(term)
        if not more_words and not more_cjk:
            order.append("")
        for word in more_words:
            key = " ".join(word.words).lower()
            words.setdefault(key, word)
            order.append(key)
        for piece in more_cjk:
            cjk.setdefault(piece, None)
            order.append("")  # CJK pieces break word adjacency
    if not words and not cjk:
        return None
    kept_words = tuple(words.values())[:MAX_NATURAL_TERMS]
    kept_cjk = tuple(cjk)[:MAX_NATURAL_TERMS - len(kept_words)]
    if len(kept_words) + len(kept_cjk) == 1 and not days:
        single = kept_words[0] if kept_words else Term((kept_cjk[0],))
        return NaturalPlan(kept_words, kept_cjk, single=single, glued=glued_words(kept_words),
                           chunks=glued_chunks(kept_words))
    pairs = tuple(dict.fromkeys(
        (a, b) for a, b in itertools.pairwise(order)
        if a and b and a != b and " " not in a + b))
    return NaturalPlan(kept_words, kept_cjk, pairs=pairs[:8], days=days,
                       glued=glued_words(kept_words), chunks=glued_chunks(kept_words))


GLUED_CHARS = 3  # the trigram index finds substrings this long or longer


def glued_words(words: tuple[Term, ...]) -> tuple[str, ...]:
    """The plain ASCII words among ``words`` (3+ letters or digits, no prefix) that a CJK
    message may hold glued to its text, as in ``用pytest跑一下``, ``端口是5433`` or (full-width)
    ``ＡＰＩキー``: the word index keeps such a run as one token, so the backends also look for
    these words as whole words beside a CJK letter in CJK messages (``glued_in``)."""
    out = [t.words[0] for t in words
           if len(t.words) == 1 and not t.prefix and not t.negated
           and len(t.words[0]) >= GLUED_CHARS and t.words[0].isascii() and t.words[0].isalnum()]
    return tuple(dict.fromkeys(out))


def glued_chunks(words: tuple[Term, ...]) -> tuple[tuple[str, str], ...]:
    """(term, chunk) for the terms among ``words`` typed as one chunk of several ASCII words
    (``docker-compose.yml``, ``OPENAI_API_KEY``, ``config.toml``; 3+ characters, no prefix),
    which a CJK message may hold glued to its text (``docker-compose.yml读取它``): the word
    index keeps ``yml读取它`` as one token, so its phrase misses them; the backends also look
    for the chunk, as typed (any case), beside a CJK letter in CJK messages."""
    out = [(" ".join(t.words), t.raw) for t in words
           if len(t.words) > 1 and not t.prefix and not t.negated
           and len(t.raw) >= GLUED_CHARS and t.raw.isascii() and t.raw.isprintable()]
    return tuple(dict.fromkeys(out))


GLUED_MARK = "~"  # a glued word's entry among a message's CJK grams (PostgreSQL): "~pytest"
FULL_WIDTH = "０-９Ａ-Ｚａ-ｚ"  # full-width digits and letters, inside [...]
# what may not stand right before a ``short_span`` in a message (inside [^...]; the text's
# start may): an ASCII or full-width letter or digit, so "16号" holds no "6号"
SHORT_SPAN_EDGE = "0-9A-Za-z" + FULL_WIDTH
_ALNUM_RUN = LazyPattern(f"[0-9A-Za-z{FULL_WIDTH}]+")
MAX_GLUED_PER_MESSAGE = 64


def full_width(word: str) -> str:
    """``word`` (ASCII letters and digits) in full-width forms, as an input method types it."""
    return "".join(chr(ord(c) + 0xFEE0) for c in word)


MAX_GLUED_CHARS = 64  # longer runs are not listed as glued words


def glued_in(text: str, most: int | None = MAX_GLUED_PER_MESSAGE) -> list[str]:
    """The words of ASCII or full-width letters and digits that ``text`` holds glued to a CJK
    letter (``用pytest跑``, ``ＡＰＩキー``), in ASCII lower case, 3 to ``MAX_GLUED_CHARS``
    characters, at most ``most`` (None: every one): what a query word is matched against
    (``glued_words``; the same definition as SQLite's GLOB test)."""
    out: dict[str, None] = {}
    for run in _ALNUM_RUN.finditer(text):
        start, end = run.span()
        if not GLUED_CHARS <= end - start <= MAX_GLUED_CHARS:
            continue
        before = text[start - 1] if start else ""
        after = text[end] if end < len(text) else ""
        if is_cjk_char(before) or is_cjk_char(after):
            word = unicodedata.normalize("NFKC", run.group(0)).lower()
            if word.isascii() and word.isalnum():  # (one script per word: not ＡＰＩkey)
                out[word] = None
            if most is not None and len(out) >= most:
                break
    return list(out)


def glued_alone(plan: NaturalPlan) -> NaturalPlan | None:
    """For a one-word query (``plan.single``) that may be glued inside CJK text, the plan that
    searches the word both ways (the backends use it when the archive holds it glued), else
    None: the word is answered exactly, as typed."""
    if plan.single is None or not (plan.glued or plan.chunks):
        return None
    return NaturalPlan((plan.single,), (), glued=plan.glued, chunks=plan.chunks)
