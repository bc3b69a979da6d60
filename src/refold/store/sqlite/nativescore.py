"""The word impact index scored by the optional C scorer (``refold._scorer``).

A question of words is the common search, and in a fresh process (``refold search``, the first
search of an MCP server) most of its time was the scoring: the standard-library path
(``plainscore.py``) touches each posting as a Python object (~0.25 us each, 5-40k postings a
question at a million messages), and NumPy's import costs more than the whole search. The C
scorer decodes each term's postings, weighs them with bm25 and sums them per message in one
pass (``_scorer.c``), and hands back only the messages that can be among the best: the same
floats, so the same ids, scores and ties as the other two paths
(``tests/store/test_native_score.py`` holds the three to each other and to FTS5).

It answers a question of words and phrases (``config.toml``), with CJK pieces or not, with no
day term (``suits``; a word some CJK message holds glued to its text is scored in Python); the
others, and every query where the extension was not built
(``pip install`` without a C compiler), take the Python paths. ``REFOLD_NATIVE=0`` turns it
off (the tests and ``bench/bench_cold_search.py`` compare the paths that way).

It also scores a process's first question of CJK text only (``cjk_best``: its rows' lengths
from SQL, each row one occurrence), which imported NumPy for it before.
"""

from __future__ import annotations

import math
import os
import sqlite3
from array import array
from bisect import bisect_left
from types import ModuleType

from refold.search import rank
from refold.search.natural import NaturalPlan
from refold.search.rank import BOOST_ALL, BOOST_PHRASE
from refold.store.base import SearchQuery
from refold.store.sqlite import cjkread, plainscore, wordindex
from refold.store.sqlite.wordindex import K1, B, Gathered

_scorer: ModuleType | None
try:
    from refold import _scorer
except ImportError:  # built without a C compiler: the Python paths answer
    _scorer = None

MAX_TERMS = 32  # _scorer.c's (a question holds at most search.natural's MAX_NATURAL_TERMS)


def enabled() -> bool:
    """Is the C scorer built, and not turned off with ``REFOLD_NATIVE=0``?"""
    return _scorer is not None and os.environ.get("REFOLD_NATIVE", "1") != "0"


def suits(plan: NaturalPlan, query: SearchQuery, gathered: Gathered) -> bool:
    """Can ``fast_scores`` answer this question (words, with CJK pieces or not; no day
    term)?"""
    return (not plan.days and len(gathered.made) > 0
            and len(gathered.made) + len(plan.cjk) <= MAX_TERMS)


Merged = tuple[int, bytes, bytes, bytes, list[int]]  # count, ids, totals, masks; term sizes


def _merged(conn: sqlite3.Connection, gathered: Gathered,
            pieces: tuple[list[list[tuple[int, int]]], list[float], float] | None = None
            ) -> Merged | None:
    """Every message holding a term: (count, ids, totals, masks) packed, and each term's
    postings count; None when a phrase term cannot be counted here (then FTS5 answers).

    A term of one token is its sealed rows and its tail postings; a term of several (a
    phrase: ``config.toml``, ``e-mail``, an identifier) is the rows FTS5 matches for it with
    the phrase's count in each (``_phrase``), passed as postings of their own with their
    lengths. ``pieces``: a question's CJK pieces (``natural.cjk_pieces``), scored as
    ``natural.cjk_scores`` scores them and added to the words' score."""
    assert _scorer is not None
    lengths = gathered.tail_lengths
    terms: list[tuple[list[tuple[int, bytes, bytes, bytes]], list[tuple[int, float]]]] = []
    sizes: list[int] = []
    for (_, match), tokens in zip(gathered.terms, gathered.made, strict=True):
        if len(tokens) == 1:
            token = tokens[0]
            terms.append((_parts(gathered, token), list(gathered.tail[token])))
            sizes.append(plainscore._hits(gathered, token))
            continue
        phrase = _phrase(conn, match, tokens, gathered)
        if phrase is None:
            return None
        ids, tfs, dls = phrase
        if lengths is gathered.tail_lengths:
            lengths = dict(lengths)  # (a message's length is one, whichever term reads it)
        lengths.update(zip(ids, dls, strict=True))
        terms.append(([], list(zip(ids, tfs, strict=True))))
        sizes.append(len(ids))
    idfs = [plainscore._weigher(gathered, size).idf for size in sizes]
    if pieces is None:
        found = _scorer.merge(terms, lengths, idfs, gathered.avgdl, K1, B)
    else:
        found = _scorer.merge(terms, lengths, idfs, gathered.avgdl, K1, B, pieces[0],
                              pieces[1], pieces[2], rank.K1, rank.B)
    count, ids_out, totals, masks = found
    return count, ids_out, totals, masks, sizes


def _parts(gathered: Gathered, token: str) -> list[tuple[int, bytes, bytes, bytes]]:
    return [(wordindex.base_of(c), i, f, n) for c, i, f, n in gathered.parts[token]]


def _phrase(conn: sqlite3.Connection, match: str, tokens: tuple[str, ...],
            gathered: Gathered) -> plainscore.Postings | None:
    """``plainscore._phrase`` with each matched row's counts and length looked up in the
    tokens' postings by the C scorer (not each token's postings made Python objects)."""
    assert _scorer is not None
    matched = plainscore.phrase_matches(conn, match)
    if not matched:
        return [], [], []
    found = _scorer.phrase_rows(matched, [(_parts(gathered, t), list(gathered.tail[t]))
                                          for t in tokens], gathered.tail_lengths)
    if found is None:
        return None  # the index and FTS5 disagree: let FTS5 answer
    return plainscore.phrase_counted(conn, tokens, matched, *found)


def _glued(conn: sqlite3.Connection, plan: NaturalPlan, query: SearchQuery, ids: bytes,
           masks: bytes, sizes: list[int]) -> bool:
    """Does a CJK message hold one of the question's words glued to its text
    (``natural.glued_scores``, with the index's own postings saying who holds each as a
    token)?"""
    from refold.store.sqlite import natural

    number = {" ".join(t.words): n for n, t in enumerate(plan.words)}
    found, held = array("q"), array("I")
    found.frombytes(ids)
    held.frombytes(masks)

    def holding(word: str, among: list[int]) -> set[int]:
        bit = 1 << number[word]
        out: set[int] = set()
        for i in among:
            at = bisect_left(found, i)
            if at < len(found) and found[at] == i and held[at] & bit:
                out.add(i)
        return out

    return bool(natural.glued_scores(conn, plan, query, lambda w: sizes[number[w]], holding))


def fast_scores(conn: sqlite3.Connection, plan: NaturalPlan, query: SearchQuery, limit: int,
                gathered: Gathered) -> dict[int, float] | None:
    """``plainscore.fast_scores`` for a question ``suits`` lets through: the exact boosted
    scores of the messages that can be among the best ``limit`` (``plainscore._rank``'s
    steps, on the C scorer's arrays), or None (then FTS5 answers)."""
    from refold.store.sqlite import natural

    assert _scorer is not None
    pieces = natural.cjk_pieces(conn, plan, query) if plan.cjk else None
    if pieces is not None and not any(pieces[0]):
        # (no message holds a CJK piece: plainscore adds no CJK score, and then leaves who
        # holds every word as it is)
        pieces = None
    merged = _merged(conn, gathered, pieces)
    if merged is None:
        return None
    count, ids, totals, masks, sizes = merged
    full = (1 << (len(gathered.made) + (len(plan.cjk) if pieces is not None else 0))) - 1
    if (plan.glued or plan.chunks) and _glued(conn, plan, query, ids, masks, sizes):
        # a CJK message holds a word glued to its text (rare): scored with it in Python
        return plainscore.fast_scores(conn, plan, query, limit, gathered)
    boost_all = 1.0 + BOOST_ALL
    top = 1.0 + BOOST_ALL + (BOOST_PHRASE if plan.pairs else 0.0)  # the largest boost
    position = {" ".join(t.words).lower(): n for n, t in enumerate(plan.words)}
    pairs = [(position.get(a), position.get(b)) for a, b in plan.pairs]
    anywhere = any(a is None or b is None for a, b in pairs)
    both = [(1 << a) | (1 << b) for a, b in pairs if a is not None and b is not None]

    def could(mask: int) -> bool:  # holds both words of a pair (or a pair's word is no term)
        return anywhere or any(mask & bits == bits for bits in both)

    # a message's largest boost: factors[2 * (holds every term) + (could hold a phrase)]
    factors = ((1.0, 1.0 + BOOST_PHRASE, 1.0 + BOOST_ALL, 1.0 + BOOST_ALL + BOOST_PHRASE)
               if plan.pairs else (1.0, 1.0, boost_all, boost_all))
    pair_terms = {n for pair in pairs for n in pair}
    phrase_postings: int | None = None  # the pair words' postings (natural.phrase_by_index)
    if pair_terms and None not in pair_terms:
        phrase_postings = sum(sizes[n] for n in pair_terms if n is not None)
    if query.session_id is not None:  # one session: exactly the rows it allows
        where, args = natural.filters(query)
        rows = conn.execute(f"SELECT m.id FROM messages m{natural._join(query)} WHERE 1{where}",
                            args).fetchall()
        inside = list(zip(*_scorer.picked(ids, totals, masks, [int(r[0]) for r in rows]),
                          strict=True))
        bar = plainscore._kth([t * boost_all if m == full else t for _, t, m in inside],
                              max(1, limit))
        kept = [(i, t, m, u) for i, t, m, u in (
            (i, t, m, t * factors[2 * (m == full) + could(m)]) for i, t, m in inside) if u >= bar]
        return plainscore.best_boosted(
            conn, plan, [c[0] for c in kept], [c[1] for c in kept], [c[2] == full for c in kept],
            [c[3] for c in kept], limit, phrase_postings, [could(c[2]) for c in kept])
    want = max(1, limit)
    while True:
        bar = _scorer.kth(totals, masks, full, boost_all, want)
        cut = bar / top * (1.0 - 1e-9)  # a hair under: the exact test on the boosted follows
        # (the messages whose boosted score can reach the bar: plainscore._rank's chosen)
        chosen = list(zip(*_scorer.chosen(ids, totals, masks, cut, bar, full, factors, both,
                                          anywhere), strict=True))
        allowed = natural.allowed_ids(conn, [c[0] for c in chosen], query)
        kept = [c for c in chosen if c[0] in allowed]
        out = plainscore.best_boosted(
            conn, plan, [c[0] for c in kept], [c[1] for c in kept], [c[2] == full for c in kept],
            [c[3] for c in kept], limit, phrase_postings, [could(c[2]) for c in kept])
        if len(out) >= limit and sorted(out.values())[-limit] >= bar:
            return out
        if len(chosen) == count or want >= natural.MAX_FAST_FETCH:
            return out if len(chosen) == count else None
        want = min(want * 4, natural.MAX_FAST_FETCH)


def best_of_term(conn: sqlite3.Connection, gathered: Gathered,
                 limit: int) -> list[tuple[int, float]] | None:
    """``plainscore.best_of_term``: (id, FTS5 rank) of the best ``limit`` matches of one
    term, best score first, then the higher id; None (then FTS5 answers)."""
    assert _scorer is not None and len(gathered.made) == 1
    merged = _merged(conn, gathered)
    if merged is None:
        return None
    _, ids, totals, masks, _ = merged
    bar = _scorer.kth(totals, masks, 0, 1.0, max(1, limit))  # (no mask is 0: unboosted)
    found, scores, _, _ = _scorer.chosen(ids, totals, masks, bar, bar, 0, (1.0,) * 4, [],
                                         False)
    best = sorted(zip(scores, found, strict=True), reverse=True)[:limit]
    return [(i, -score) for score, i in best]


def cjk_best(conn: sqlite3.Connection, plan: NaturalPlan, query: SearchQuery, limit: int,
             total: int, average: float) -> dict[int, float]:
    """``natural.cjk_best`` for a process's first CJK question: each piece's rows from SQL
    (``natural._postings``), weighed and summed by the C scorer as the NumPy path does, the
    messages holding every piece boosted; those at or above the ``limit``-th best."""
    from refold.store.sqlite import natural

    assert _scorer is not None
    cjkread.ask_lengths(conn, plan.cjk, query)
    pieces = natural.piece_rows(conn, plan.cjk, query)
    idfs = [rank.idf(total, len(rows)) for rows in pieces]
    count, ids, totals, masks = _scorer.merge_rows(pieces, idfs, average, rank.K1, rank.B)
    if not count:
        return {}
    full, boost = (1 << len(pieces)) - 1, 1.0 + BOOST_ALL
    bar = _scorer.kth(totals, masks, full, boost, max(1, limit))
    found, _, _, final = _scorer.chosen(ids, totals, masks, -math.inf, bar, full,
                                        (1.0, 1.0, boost, boost), [], False)
    return dict(zip(found, final, strict=True))
