"""The word impact index scored without NumPy, for queries whose postings are few.

``natural.fast_scores`` and ``wordindex.best_of_term`` score a query's word terms with NumPy over
the whole id space. In a fresh process (``refold search`` on the command line is one) that
costs more than the scoring: NumPy's import (~50-70 ms here) and the first touches of arrays the
size of the archive (one ``bincount`` over a million ids took 12-20 ms the first time, ~2 ms
after), for a question whose terms hold ~10k postings. This module computes the same answers with
the standard library, over dicts and lists sized by the postings: each term's postings decoded
with ``array``, its weights computed once per distinct (term frequency, length) pair with the
very expression ``term_weights`` evaluates elementwise, and summed per message in the order of
the terms, as ``numpy.bincount`` sums them. Every float is the same, so every id, score and tie
is (``tests/store/test_plain_score.py`` holds the two paths to each other and to FTS5).

``use_plain`` chooses: a query of at most ``PLAIN_WARM`` postings always (NumPy is no faster
there); a bigger one until the process has scored ``PLAIN_BUDGET`` postings of such queries
here, after which NumPy is imported (the standard library's extra cost on them has then paid
for the import: a long-running process ends up where it was; a command-line search imports
NumPy only for a query of more than ``PLAIN_BUDGET`` postings), or ``PLAIN_FIRST`` when NumPy
was imported already (its first use still costs page faults).
"""

from __future__ import annotations

import heapq
import math
import sqlite3
import sys
from array import array
from collections.abc import Callable, Container, Iterable, Sequence
from itertools import compress

from refold.search.natural import NaturalPlan
from refold.search.rank import BOOST_ALL, BOOST_PHRASE, boosted
from refold.store.base import SearchQuery
from refold.store.sqlite import wordindex
from refold.store.sqlite.wordindex import K1, LENS, TFS, B, Gathered

# Measured at a million messages (the bench's questions, in one process, warm): under 2k
# postings both take ~0.6 ms; from 4k on the standard library takes ~0.25-0.35 us a posting
# more than NumPy (16-40k postings: 5.6 against 1.5 ms p50), whose import costs ~50-70 ms:
# ~300k postings of extra cost.
PLAIN_WARM = 2_000
PLAIN_BUDGET = 300_000
# With NumPy already imported (a server), its first arrays the size of the archive still cost
# page faults: a fresh process's first question scored here took 13.9 ms of CPU against 16.5
# (sys 4.1 against 7.1 ms; cold, a million messages, 10 questions of 10-40k postings)
PLAIN_FIRST = 50_000
_ABOVE_ONE = bytes([0, 0] + [1] * 254)  # bytes.translate: a frequency byte above one -> 1
_spent = 0  # postings of queries over PLAIN_WARM scored here by this process

Postings = tuple[list[int], list[float], list[int]]  # ids, term frequencies, lengths


def use_plain(gathered: Gathered) -> bool:
    """Score ``gathered`` here rather than with NumPy? (Counts what it spends here.)"""
    global _spent
    postings = gathered.postings()
    if postings <= PLAIN_WARM:
        return True
    budget = min(PLAIN_BUDGET, PLAIN_FIRST) if "numpy" in sys.modules else PLAIN_BUDGET
    if _spent + postings > budget:
        return False
    _spent += postings  # (two threads at once: the count is only an estimate)
    return True


def _decoded(typecode: str, blob: bytes) -> array[int]:
    values = array(typecode)
    values.frombytes(blob)
    if sys.byteorder == "big":
        values.byteswap()
    return values


def postings(parts: wordindex.Parts, tail: list[tuple[int, int]],
             tail_lengths: dict[int, int]) -> Postings:
    """One token's postings (``wordindex._postings``): sealed rows, then the tail."""
    ids: list[int] = []
    tfs: list[float] = []
    lengths: list[int] = []
    for chunk, id_blob, tf_blob, len_blob in parts:
        count = len(id_blob) // 2
        base = wordindex.base_of(chunk)
        ids.extend([base + offset for offset in _decoded("H", id_blob)])
        tfs.extend(_decoded(wordindex._width(TFS, tf_blob, count), tf_blob))
        lengths.extend(_decoded(wordindex._width(LENS, len_blob, count), len_blob))
    for doc, count in tail:
        ids.append(doc)
        tfs.append(count)
        lengths.append(tail_lengths.get(doc, 0))
    return ids, tfs, lengths


def phrase_matches(conn: sqlite3.Connection, match: str) -> list[int]:
    """The rows FTS5 matches for a phrase term, ascending."""
    return [int(r[0]) for r in conn.execute(
        "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? ORDER BY rowid", (match,))]


def _phrase(conn: sqlite3.Connection, match: str, tokens: tuple[str, ...],
            each: list[Postings]) -> Postings | None:
    """A phrase term's postings (``wordindex._phrase``): the rows FTS5 matches for it, each
    with the phrase's count, or None (then FTS5 answers)."""
    matched = phrase_matches(conn, match)
    if not matched:
        return [], [], []
    least: list[float] = []
    lengths: list[int] = []
    for n, (ids, tfs, dls) in enumerate(each):
        at = dict(zip(ids, range(len(ids)), strict=True))
        if any(i not in at for i in matched):
            return None  # the index and FTS5 disagree: let FTS5 answer
        where = [at[i] for i in matched]
        found = [tfs[j] for j in where]
        least = found if n == 0 else list(map(min, least, found))
        if n == 0:
            lengths = [dls[j] for j in where]
    return phrase_counted(conn, tokens, matched, least, lengths)


def phrase_counted(conn: sqlite3.Connection, tokens: tuple[str, ...], matched: list[int],
                   least: list[float], lengths: list[int]) -> Postings | None:
    """The phrase's postings from its matched rows, the least count of its tokens in each and
    each one's length: a row whose tokens each occur once holds the phrase once; the others'
    text is tokenized to count it (None past ``PHRASE_RECOUNT`` of them: FTS5 answers)."""
    counts = [1.0] * len(matched)
    recount = [k for k, tf in enumerate(least) if tf > 1]
    if len(recount) > wordindex.PHRASE_RECOUNT:
        return None
    if recount:
        ids = [matched[k] for k in recount]
        marks = ",".join("?" * len(ids))
        rows = conn.execute(f"SELECT id, text FROM messages WHERE id IN ({marks})",
                            ids).fetchall()
        found_counts = wordindex.tokenizer().phrase_counts(rows, tokens)
        for k, i in zip(recount, ids, strict=True):
            counts[k] = float(found_counts.get(i, 0))
    keep = [k for k, c in enumerate(counts) if c > 0]
    return [matched[k] for k in keep], [counts[k] for k in keep], [lengths[k] for k in keep]


def _hits(gathered: Gathered, token: str) -> int:
    """How many messages hold ``token`` (its postings' count, from the blobs' sizes)."""
    return sum(len(p[1]) // 2 for p in gathered.parts[token]) + len(gathered.tail[token])


def _weigher(gathered: Gathered, hits: int) -> _Weights:
    """The weights of a term ``hits`` messages hold (its IDF as ``bm25()`` takes it)."""
    idf = math.log((gathered.total_rows - hits + 0.5) / (hits + 0.5))
    return _Weights(1e-6 if idf <= 0.0 else idf, gathered.avgdl)


def _weigh(gathered: Gathered, token: str, weight: Callable[[tuple[float, int]], float],
           among: Container[int] | None = None) -> dict[int, float]:
    """One token's weight of each message holding it ({id: weight}), decoded and weighed row
    by row; with ``among``, of those messages only."""
    found: dict[int, float] = {}
    for chunk, id_blob, tf_blob, len_blob in gathered.parts[token]:
        count, base = len(id_blob) // 2, wordindex.base_of(chunk)
        ids = [base + offset for offset in _decoded("H", id_blob)]
        pairs = zip(_decoded(wordindex._width(TFS, tf_blob, count), tf_blob),
                    _decoded(wordindex._width(LENS, len_blob, count), len_blob), strict=True)
        if among is None:
            found.update(zip(ids, map(weight, pairs), strict=True))
        else:
            found.update((i, weight(pair)) for i, pair in compress(
                zip(ids, pairs, strict=True), map(among.__contains__, ids)))
    for doc, count in gathered.tail[token]:
        if among is None or doc in among:
            found[doc] = weight((count, gathered.tail_lengths.get(doc, 0)))
    return found


def _bound(gathered: Gathered, token: str, weight: Callable[[tuple[float, int]], float]) -> float:
    """At least ``token``'s weight in any message holding it (a weight rises with the term
    frequency and falls with the length): the larger of the weight of a frequency of one at
    the shortest length and of the highest frequency at the shortest length of a message
    whose frequency is above one (few are; each row's found by C-level scans, not decoded
    posting by posting)."""
    low = several_low = several_top = -1
    for _, id_blob, tf_blob, len_blob in gathered.parts[token]:
        count = len(id_blob) // 2
        if not count:
            continue
        lengths = _decoded(wordindex._width(LENS, len_blob, count), len_blob)
        least = min(lengths)
        low = least if low < 0 else min(low, least)
        if len(tf_blob) == count:  # one byte a frequency
            top = max(tf_blob)
            several = tf_blob.translate(_ABOVE_ONE)  # a true byte where the frequency is > 1
        else:
            frequencies = _decoded("H", tf_blob)
            top = max(frequencies)
            several = bytes(f > 1 for f in frequencies)
        if top > 1:
            shortest = min(compress(lengths, several))
            several_low = shortest if several_low < 0 else min(several_low, shortest)
            several_top = max(several_top, top)
    for doc, count in gathered.tail[token]:
        length = gathered.tail_lengths.get(doc, 0)
        low = length if low < 0 else min(low, length)
        if count > 1:
            several_low = length if several_low < 0 else min(several_low, length)
            several_top = max(several_top, count)
    if low < 0:
        return 0.0
    one = weight((1, low))
    return one if several_top < 0 else max(one, weight((several_top, several_low)))


def term_weights(conn: sqlite3.Connection, gathered: Gathered,
                 weighed: dict[str, dict[int, float]] | None = None
                 ) -> list[dict[int, float]] | None:
    """``wordindex.term_weights`` without NumPy: each term's bm25 weight of each message
    holding it ({id: weight}), or None (then FTS5 answers). ``weighed``: tokens already
    weighed for every message holding them (``_pruned``'s, when it could not prune)."""
    loaded: dict[str, Postings] = {}

    def load(token: str) -> Postings:
        if token not in loaded:
            loaded[token] = postings(gathered.parts[token], gathered.tail[token],
                                     gathered.tail_lengths)
        return loaded[token]

    weighed = dict(weighed or {})  # a token's weights (its terms' are the same)
    out: list[dict[int, float]] = []
    for (_, match), tokens in zip(gathered.terms, gathered.made, strict=True):
        if len(tokens) == 1:
            if tokens[0] not in weighed:
                weighed[tokens[0]] = _weigh(gathered, tokens[0], _weigher(
                    gathered, _hits(gathered, tokens[0])).__getitem__)
            out.append(weighed[tokens[0]])
            continue
        phrase = _phrase(conn, match, tokens, [load(t) for t in tokens])
        if phrase is None:
            return None
        ids, tfs, dls = phrase
        weight = _weigher(gathered, len(ids)).__getitem__
        out.append(dict(zip(ids, map(weight, zip(tfs, dls, strict=True)), strict=True)))
    return out


class _Weights(dict[tuple[float, int], float]):
    """One term's bm25 weight of each (term frequency, length) pair, computed on first use
    with ``wordindex.term_weights``' expression: the same float64 steps in the same order,
    so the same bits."""

    def __init__(self, idf: float, avgdl: float) -> None:
        super().__init__()
        self.idf, self.avgdl = idf, avgdl

    def __missing__(self, key: tuple[float, int]) -> float:
        tf, dl = key
        value = self[key] = self.idf * ((tf * (K1 + 1.0))
                                        / (tf + K1 * (1 - B + B * dl / self.avgdl)))
        return value


def best_of_term(conn: sqlite3.Connection, gathered: Gathered,
                 limit: int) -> list[tuple[int, float]] | None:
    """``wordindex.best_of_term`` without NumPy: (id, FTS5 rank) of the best ``limit``
    matches of one term, best score first, then the higher id."""
    weights = term_weights(conn, gathered)
    if weights is None:
        return None
    found = weights[0]
    return [(i, -score) for score, i in heapq.nlargest(
        limit, zip(found.values(), found.keys(), strict=True))]


class Words:
    """``wordindex.WordScores`` over the matching messages only: ``raw`` bm25 of each message
    holding any term, ``held`` each term's ids with its weights, ``every`` the messages
    holding every term."""

    def __init__(self, weights: list[dict[int, float]]) -> None:
        self.held = weights
        raw: dict[int, float] = {}
        for more in self.held:
            if not more:
                continue
            if not raw:
                raw = dict(more)
                continue
            # summed in the order of the terms, from the first: as bincount adds them
            sums = {i: raw[i] + more[i] for i in raw.keys() & more.keys()}
            raw.update(more)
            raw.update(sums)
        self.raw = raw
        every: set[int] = set()
        if self.held and all(self.held):
            for n, more in enumerate(sorted(self.held, key=len)):
                every = set(more) if n == 0 else every.intersection(more)
        self.every = every


def _kth(values: Iterable[float], k: int) -> float:
    """The ``k``-th largest of ``values``, or -inf when there are fewer."""
    best = heapq.nlargest(k, values)
    return best[-1] if len(best) >= k else -math.inf


def _top_exact(ids: list[int], final: list[float], limit: int) -> dict[int, float]:
    """``natural._top_exact``: the ``limit`` best and every score tied with the last."""
    if len(final) > limit:
        bar = _kth(final, limit)
        return {i: f for i, f in zip(ids, final, strict=True) if f >= bar}
    return dict(zip(ids, final, strict=True))


def best_boosted(conn: sqlite3.Connection, plan: NaturalPlan, ids: list[int],
                 scores: list[float], every: list[bool], upper: list[float], limit: int,
                 phrase_postings: int | None, could: list[bool] | None = None
                 ) -> dict[int, float]:
    """``natural._best_boosted`` over lists: the same rows tested, the same answer."""
    from refold.store.sqlite import natural

    if not plan.pairs:
        return _top_exact(ids, [s * (1.0 + BOOST_ALL if e else 1.0)
                                for s, e in zip(scores, every, strict=True)], limit)
    if could is None:
        could = [True] * len(ids)
    if natural.phrase_by_index(phrase_postings, sum(could), limit):
        match = " OR ".join(f'"{a} {b}"' for a, b in plan.pairs)
        held = natural._matching(conn, match, set(ids))
        return _top_exact(ids, [s * (1.0 + (BOOST_ALL if e else 0.0)
                                     + (BOOST_PHRASE if i in held else 0.0))
                                for i, s, e in zip(ids, scores, every, strict=True)], limit)
    order = sorted(range(len(ids)), key=lambda j: -upper[j])  # stable, as argsort's
    out: dict[int, float] = {}
    best: list[float] = []  # the limit best exact scores so far (a min-heap)
    step = max(natural.PHRASE_BATCH, limit)
    for start in range(0, len(order), step):
        if len(best) >= limit and upper[order[start]] < best[0]:
            break  # nothing left can reach the limit-th best (ties go on: recency breaks them)
        part = order[start:start + step]
        batch = [ids[j] for j in part]
        phrase = natural._phrases(conn, plan, [ids[j] for j in part if could[j]])
        for j, i in zip(part, batch, strict=True):
            out[i] = exact = boosted(scores[j], has_all=every[j], has_phrase=i in phrase)
            if len(best) < limit:
                heapq.heappush(best, exact)
            elif exact > best[0]:
                heapq.heapreplace(best, exact)
    return out


def fast_scores(conn: sqlite3.Connection, plan: NaturalPlan, query: SearchQuery, limit: int,
                gathered: Gathered) -> dict[int, float] | None:
    """``natural.fast_scores`` without NumPy, on the same inputs: the same answer.

    The NumPy path finds its bar (the ``limit``-th best score without the phrase boost) and
    its candidates (every message whose score with it can reach the bar) through the rarest
    term first; both are fixed by the scores alone, so here they are taken over every
    matching message at once (or over those ``_pruned`` keeps)."""
    from refold.store.sqlite import natural

    weighed: dict[str, dict[int, float]] = {}
    found = _pruned(conn, plan, query, limit, gathered, weighed)
    if found is not None:
        return found
    weights = term_weights(conn, gathered, weighed)
    if weights is None:
        return None
    words = Words(weights)
    cjk, every_cjk = natural.cjk_scores(conn, plan, query)
    if plan.glued or plan.chunks:  # the index's own postings say who holds each as a token
        number = {" ".join(t.words): n for n, t in enumerate(plan.words)}
        cjk = natural._plus(cjk, natural.glued_scores(
            conn, plan, query, lambda w: len(words.held[number[w]]),
            lambda w, ids: words.held[number[w]].keys() & set(ids)))
    days = natural.day_scores(conn, plan, query)
    total = words.raw
    held = words.every
    if cjk or days:  # (words + cjk) + days, as natural_scores adds them
        if plan.cjk:
            held = held & every_cjk
        if days:
            held = held & days.keys()
            days = natural.trim_days(days, total.keys() | cjk.keys(), limit)
        total = dict(total)
        for extra in (cjk, days):
            for i, score in extra.items():
                total[i] = total.get(i, 0.0) + score
    return _rank(conn, plan, query, limit, total, held, words.held,
                 [len(found) for found in words.held], True)


PRUNE_FROM = 5_000  # postings from which a question's commonest words may be left out
CHEAP = 8  # a word of at most 1/CHEAP of a question's postings is weighed for every message


def _pruned(conn: sqlite3.Connection, plan: NaturalPlan, query: SearchQuery, limit: int,
            gathered: Gathered, full: dict[str, dict[int, float]] | None = None
            ) -> dict[int, float] | None:
    """``fast_scores`` of a question of words (no CJK, no day, no session), scoring only the
    messages that hold one of its rarer words, when its commoner ones cannot place a message
    alone; None when that does not hold (then every message is scored).

    The messages of the rarest words are scored first, from those words alone (at least
    ``limit`` messages' worth, and every word cheap beside the question's postings: a higher
    floor for the price of words that are weighed in full anyway): the ``limit``-th best of
    those partial scores is a floor of the bar. A message holding none
    but the commonest words, whose weights at most (``_bound``) add up under that floor,
    cannot reach the bar even boosted (it lacks a word, so only the phrase boost applies):
    those words are weighed for the messages of the others only. (MaxScore, as search
    engines call it.) ``full`` receives the words weighed for every message (for the caller
    to reuse when this returns None)."""
    from refold.store.sqlite import natural

    if plan.cjk or plan.days or query.session_id is not None \
            or any(len(m) != 1 for m in gathered.made) or gathered.postings() < PRUNE_FROM:
        return None
    tokens = [m[0] for m in gathered.made]
    hits = {t: _hits(gathered, t) for t in tokens}
    weigher = {t: _weigher(gathered, hits[t]).__getitem__ for t in hits}
    want = max(1, limit)
    if full is None:
        full = {}  # tokens weighed for every message holding them
    seed: set[int] = set()
    cheap = gathered.postings() // CHEAP
    for token in sorted(hits, key=hits.__getitem__):
        if len(seed) >= want and hits[token] > cheap:
            break
        if hits[token]:
            full[token] = _weigh(gathered, token, weigher[token])
            seed.update(full[token])
    if len(seed) < want:
        return None
    # (each a sum of some of the message's weights, in any order: a hair under, as a floor)
    floor = _kth([sum(found.get(i, 0.0) for found in full.values()) for i in seed],
                 want) * (1.0 - 1e-9)
    alone = 1.0 + (BOOST_PHRASE if plan.pairs else 0.0)  # a message lacking a word
    # The words not weighed yet, commonest first, are left out while a message holding only
    # those left out stays under the floor (any such set will do: the commonest save most).
    # A word's bound: what it weighs at most in a message (as many times as the question
    # holds it).
    left_out: set[str] = set()  # the words a message cannot place on alone
    reach = 0.0
    for token in sorted(hits.keys() - full.keys(), key=lambda t: (-hits[t], t)):
        bound = _bound(gathered, token, weigher[token]) * tokens.count(token)
        if (reach + bound) * alone * (1.0 + 1e-9) < floor:
            left_out.add(token)
            reach += bound
    kept = set(tokens) - left_out
    if not left_out:
        return None  # nothing left to spare
    for token in kept:
        if token not in full:
            full[token] = _weigh(gathered, token, weigher[token])
    among = set().union(*(full[t].keys() for t in kept))  # the messages that can place
    partial: dict[str, dict[int, float]] = {}
    for token in set(tokens) - kept:
        partial[token] = ({i: w for i, w in full[token].items() if i in among}
                          if token in full else _weigh(gathered, token, weigher[token], among))
    words = Words([full[t] if t in kept else partial[t] for t in tokens])
    if plan.glued or plan.chunks:
        number = {" ".join(t.words): n for n, t in enumerate(plan.words)}

        def holding(word: str, ids: list[int]) -> set[int]:
            token = tokens[number[word]]
            found = full.get(token) if token in kept else None
            return (found.keys() & set(ids) if found is not None else
                    set(_weigh(gathered, token, weigher[token], set(ids))))

        if natural.glued_scores(conn, plan, query, lambda w: hits[tokens[number[w]]],
                                holding):
            return None  # a CJK message holds one glued: every message is scored
    return _rank(conn, plan, query, limit, words.raw, words.every, words.held,
                 [hits[t] for t in tokens], False)


def _rank(conn: sqlite3.Connection, plan: NaturalPlan, query: SearchQuery, limit: int,
          total: dict[int, float], held: set[int], terms: list[dict[int, float]],
          sizes: list[int], complete: bool) -> dict[int, float] | None:
    """The exact boosted scores of the messages that can be among the best ``limit``, from
    ``total`` (each message's score before boosts), ``held`` (those holding every term),
    ``terms`` (each term's messages) and ``sizes`` (each term's postings). Not ``complete``
    (``_pruned``: ``total`` lacks messages that cannot place), None when the first bar does
    not hold."""
    from refold.store.sqlite import natural

    top = 1.0 + BOOST_ALL + (BOOST_PHRASE if plan.pairs else 0.0)  # the largest boost
    def lower(ids: Sequence[int]) -> list[float]:
        return [total[i] * (1.0 + BOOST_ALL) if i in held else total[i] for i in ids]

    position = {" ".join(t.words).lower(): n for n, t in enumerate(plan.words)}
    pairs = [(position.get(a), position.get(b)) for a, b in plan.pairs]
    anywhere = any(a is None or b is None for a, b in pairs)
    phrased = [terms[a].keys() & terms[b].keys() for a, b in pairs
               if a is not None and b is not None]
    could = set().union(*phrased) if phrased and not anywhere else set()

    def upper(ids: Sequence[int]) -> list[float]:
        if not plan.pairs:
            return lower(ids)
        return [total[i] * ((1.0 + BOOST_ALL + BOOST_PHRASE if i in held else 1.0 + BOOST_PHRASE)
                            if anywhere or i in could else (1.0 + BOOST_ALL if i in held else 1.0))
                for i in ids]

    def may_phrase(ids: Sequence[int]) -> list[bool]:
        """Which of ``ids`` ``upper`` lets hold a phrase (the others' text is never read)."""
        return [anywhere or i in could for i in ids]

    pair_terms = {n for pair in pairs for n in pair}
    phrase_postings: int | None = None  # the pair words' postings (natural.phrase_by_index)
    if pair_terms and None not in pair_terms:
        phrase_postings = sum(sizes[n] for n in pair_terms if n is not None)

    if query.session_id is not None and complete:  # one session: exactly the rows it allows
        where, args = natural.filters(query)
        rows = conn.execute(f"SELECT m.id FROM messages m{natural._join(query)} WHERE 1{where}",
                            args).fetchall()
        candidates = [int(r[0]) for r in rows if int(r[0]) in total]
        bar = _kth(lower(candidates), max(1, limit))
        chosen = [i for i, u in zip(candidates, upper(candidates), strict=True) if u >= bar]
        return best_boosted(conn, plan, chosen, [total[i] for i in chosen],
                            [i in held for i in chosen], upper(chosen), limit, phrase_postings,
                            may_phrase(chosen))
    if held:  # the lower bounds of every matching message: its score, boosted if it holds all
        bounds = dict(total)
        bounds.update((i, total[i] * (1.0 + BOOST_ALL)) for i in held)
    else:
        bounds = total
    want = max(1, limit)
    while True:
        bar = _kth(bounds.values(), want)
        cut = bar / top * (1.0 - 1e-9)  # a hair under: the exact test on the boosted follows
        near = sorted(compress(total.keys(), map(cut.__le__, total.values())))
        chosen = [i for i, u in zip(near, upper(near), strict=True) if u >= bar]
        allowed = natural.allowed_ids(conn, chosen, query)
        kept = [i for i in chosen if i in allowed]
        out = best_boosted(conn, plan, kept, [total[i] for i in kept], [i in held for i in kept],
                           upper(kept), limit, phrase_postings, may_phrase(kept))
        if len(out) >= limit and sorted(out.values())[-limit] >= bar:
            return out
        if not complete:
            return None
        if len(chosen) == len(total) or want >= natural.MAX_FAST_FETCH:
            return out if len(chosen) == len(total) else None
        want = min(want * 4, natural.MAX_FAST_FETCH)
