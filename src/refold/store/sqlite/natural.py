"""Natural-language search on SQLite: ORed weighted terms ranked by BM25 over every match.

The plan comes from ``refold.search.natural``. Word terms go to ``messages_fts`` as one OR
expression ranked by FTS5's ``bm25()`` over all its matches (exact; no recency window). CJK
terms are exact substrings: 1–2 characters through the gram index, 3+ through the trigram
index, each term's postings scored with BM25 for one occurrence (``refold.search.rank``), its
IDF counted on the rows the filters allow (``rank.filtered_total`` for the collection size).
A day the query names (``plan.days``) is one more term: the messages created on it.
Scores add; a message holding every term, or an adjacent pair as a phrase, is boosted.
Filters (session, role, source, owner, time, active) apply inside every index query, so the
ranking is over the rows the caller may see.

On an archive of ``wordindex.MIN_ROWS`` messages or more, ``fast_scores`` takes the word terms
from the word impact index (``wordindex.py``: FTS5's own ``bm25()``, to the bit, for every
message at once) and tests the filters and the phrase boost only on the messages that can
still be among the best; FTS5 answers whatever the index cannot.
"""

from __future__ import annotations

import heapq
import math
import sqlite3
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

from refold.search.dates import day_ranges
from refold.search.natural import (
    FULL_WIDTH,
    NaturalPlan,
    full_width,
    short_span,
)
from refold.search.query import CJK_CLASS, Term, is_gram_needle
from refold.search.rank import (
    BOOST_ALL,
    BOOST_PHRASE,
    K1,
    B,
    boosted,
    filtered_total,
    idf,
    presence_weight,
)
from refold.store.base import SearchQuery
from refold.store.sqlite import cjklen, glued, nativescore, plainscore, wordindex
from refold.store.sqlite.cjkread import ask_lengths, cjk_index, where_narrows
from refold.store.sqlite.indexer import watermark


def filters(query: SearchQuery) -> tuple[str, list[object]]:
    """SQL conditions on ``m`` (and ``s``) for the query's filters, with their arguments."""
    conds: list[str] = []
    args: list[object] = []
    checks: list[tuple[object, str]] = [
        (query.session_id, "m.session_id = ?"), (query.exclude_session_id, "m.session_id != ?"),
        (query.role, "m.role = ?"), (query.source, "s.source = ?"), (query.owner, "s.owner = ?"),
        (query.since, "m.created_at >= ?"), (query.until, "m.created_at <= ?")]
    for value, cond in checks:
        if value is not None:
            conds.append(cond)
            args.append(value)
    if not query.include_inactive:
        conds.append("m.active = 1")
    return "".join(" AND " + c for c in conds), args


def _join(query: SearchQuery) -> str:
    needs = query.source is not None or query.owner is not None
    return " JOIN sessions s ON s.id = m.session_id" if needs else ""


def _matching(conn: sqlite3.Connection, match: str, among: set[int]) -> set[int]:
    """The ids among ``among`` that the word index matches for ``match`` (an AND or a phrase:
    no more rows than its rarest term, so cheaper than testing each candidate)."""
    rows = conn.execute("SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?", (match,))
    return {int(r[0]) for r in rows} & among


def _all_matches(conn: sqlite3.Connection, expr: str, query: SearchQuery) -> dict[int, float]:
    where, args = filters(query)
    rows = conn.execute(
        f"SELECT f.rowid, f.rank FROM messages_fts f JOIN messages m ON m.id = f.rowid"
        f"{_join(query)} WHERE messages_fts MATCH ?{where}", [expr, *args]).fetchall()
    return {int(rowid): -float(rank) for rowid, rank in rows}


def _best_matches(conn: sqlite3.Connection, expr: str, query: SearchQuery,
                  budget: int) -> dict[int, float] | None:
    """The ``budget`` best-ranked matches of the whole index that pass the filters, or None
    when the filters left too few of them (then every match is scored with the filters).

    FTS5 ranks every match either way; what this saves is joining each one to its message.
    """
    rows = conn.execute("SELECT rowid, rank FROM messages_fts WHERE messages_fts MATCH ? "
                        "ORDER BY rank LIMIT ?", (expr, budget)).fetchall()
    if not rows:
        return {}
    where, args = filters(query)
    marks = ",".join("?" * len(rows))
    allowed = {int(r[0]) for r in conn.execute(
        f"SELECT m.id FROM messages m{_join(query)} WHERE m.id IN ({marks}){where}",
        [*(r[0] for r in rows), *args])}
    kept = {int(i): -float(rank) for i, rank in rows if int(i) in allowed}
    if len(rows) == budget and len(kept) < max(1, query.limit) * 2 + 10:
        return None
    return kept


def word_scores(conn: sqlite3.Connection, plan: NaturalPlan, query: SearchQuery,
                budget: int | None = None) -> tuple[dict[int, float], set[int], set[int]]:
    """bm25 of the messages matching any word term (every one, or with ``budget`` the best
    ``budget`` plus the best ``budget`` holding all terms: the all-terms boost is uniform, so
    no message left out could outrank those), the ones holding them all, and the ones holding
    an adjacent pair as a phrase."""
    if not plan.words:
        return {}, set(), set()
    expr = " OR ".join(t.fts5() for t in plan.words)
    every_expr = " AND ".join(t.fts5() for t in plan.words)
    scores: dict[int, float] | None = None
    if budget is not None:
        scores = _best_matches(conn, expr, query, budget)
        both = _best_matches(conn, every_expr, query, budget) if scores is not None else None
        scores = None if both is None or scores is None else {**scores, **both}
    if scores is None:
        scores = _all_matches(conn, expr, query)
    every = set(scores)
    if len(plan.words) > 1:
        every = _matching(conn, every_expr, every)
    phrase: set[int] = set()
    if plan.pairs:
        phrase = _matching(conn, " OR ".join(f'"{a} {b}"' for a, b in plan.pairs), set(scores))
    return scores, every, phrase


def _postings(conn: sqlite3.Connection, piece: str, query: SearchQuery,
              where: str, args: list[object]) -> list[tuple[int, int]]:
    table, match, text, text_args = cjk_index(piece)
    if not where_narrows(query):  # lengths and the active flag from the narrow table
        active = "" if query.include_inactive else " AND l.active = 1"
        read = " JOIN messages m ON m.id = f.rowid" if text else ""
        return conn.execute(
            f"SELECT l.id, l.chars FROM {table} f JOIN {cjklen.TABLE} l ON l.id = f.rowid"
            f"{read} WHERE {table} MATCH ?{active}{text}", [match, *text_args]).fetchall()
    return conn.execute(
        f"SELECT m.id, length(m.text) FROM {table} f JOIN messages m ON m.id = f.rowid"
        f"{_join(query)} WHERE {table} MATCH ?{where}{text}",
        [match, *args, *text_args]).fetchall()


def piece_rows(conn: sqlite3.Connection, pieces: Sequence[str],
               query: SearchQuery) -> list[list[tuple[int, int]]]:
    """``_postings`` of each piece (no filter narrowing the query): from the packed blocks
    of ``cjklen`` when the pieces' postings are many, else joined."""
    indexed = [piece for piece in pieces if not short_span(piece)]  # (a short span: its text)
    packed = cjklen.weighed_postings(conn, [cjk_index(p)[:2] for p in indexed],
                                     query.include_inactive) if indexed else None
    found = dict(zip(indexed, packed, strict=True)) if packed is not None else {}
    return [found[p] if p in found else _postings(conn, p, query, "", []) for p in pieces]


def _unfiltered_count(conn: sqlite3.Connection, piece: str) -> int:
    table, match, text, text_args = cjk_index(piece)
    read = " JOIN messages m ON m.id = f.rowid" if text else ""
    return int(conn.execute(f"SELECT count(*) FROM {table} f{read} WHERE {table} MATCH ?{text}",
                            [match, *text_args]).fetchone()[0])


def _cjk_collection(conn: sqlite3.Connection) -> tuple[int, float]:
    """The collection size for CJK IDF (the highest id: a count would cost a scan; scaled by
    ``rank.filtered_total`` under filters) and the average length of the newest 500 CJK
    messages."""
    total = int(conn.execute("SELECT coalesce(max(id), 0) FROM messages").fetchone()[0])
    average = float(conn.execute(
        f"SELECT avg(chars) FROM (SELECT chars FROM {cjklen.TABLE} "
        "ORDER BY id DESC LIMIT 500)").fetchone()[0] or 1.0)
    return total, average


def cjk_best(conn: sqlite3.Connection, plan: NaturalPlan, query: SearchQuery,
             limit: int) -> dict[int, float] | None:
    """``natural_scores`` of a CJK-only question (no words, no days, no filter narrowing it)
    on a large archive, with NumPy: the same scores as ``cjk_scores`` and the boost give, for
    the messages at or above the ``limit``-th best. None: not such a question."""
    if plan.words or plan.days or not plan.cjk or where_narrows(query):
        return None
    if watermark(conn) < wordindex.MIN_ROWS:
        return None
    total, average = _cjk_collection(conn)
    path = wordindex.database_path(conn)
    # (no copy of the table where the C readers weigh postings from the packed blocks)
    copy = cjklen.lengths_for(path).current(conn, path) \
        if path and not cjklen.blocks_usable() else None
    if copy is None and nativescore.enabled() and len(plan.cjk) <= nativescore.MAX_TERMS:
        # a process's first CJK question (a CLI search): the C scorer, no NumPy import
        return nativescore.cjk_best(conn, plan, query, limit, total, average)
    import numpy as np

    present: list[tuple[Any, Any]] = []  # (ids, lengths) of each piece with postings
    if copy is None:
        ask_lengths(conn, plan.cjk, query)
    for piece in plan.cjk:
        if copy is None or short_span(piece):  # (a short span's text is read: no copy)
            rows = _postings(conn, piece, query, "", [])
            found = (np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows)),
                     np.fromiter((r[1] for r in rows), dtype=np.float64, count=len(rows)))
        else:  # the index's rowids, looked up in this process's copy of cjk_lengths
            table = "messages_cjk_grams" if is_gram_needle(piece) else "messages_trigram"
            rows = conn.execute(f"SELECT rowid FROM {table} WHERE {table} MATCH ? "
                                "ORDER BY rowid", ['"' + piece + '"']).fetchall()
            found = copy.lookup(np.fromiter((r[0] for r in rows), dtype=np.int64,
                                            count=len(rows)), query.include_inactive)
        if len(found[0]):
            present.append(found)
    if not present:
        return {}
    ids = np.concatenate([found[0] for found in present])
    parts = []
    for found_ids, chars in present:
        norm = 1.0 - B + B * (chars / average)  # rank.presence_weight, elementwise
        parts.append(idf(total, len(found_ids)) * ((K1 + 1.0) / (1.0 + K1 * norm)))
    docs, inverse = np.unique(ids, return_inverse=True)
    scores = np.bincount(inverse, weights=np.concatenate(parts), minlength=len(docs))
    every = np.bincount(inverse, minlength=len(docs)) == len(plan.cjk)
    final = scores * np.where(every, 1.0 + BOOST_ALL, 1.0)  # rank.boosted, no phrase
    if len(final) > limit:
        keep = final >= np.partition(final, -limit)[-limit]
        docs, final = docs[keep], final[keep]
    return dict(zip(docs.tolist(), final.tolist(), strict=True))


def cjk_pieces(conn: sqlite3.Connection, plan: NaturalPlan, query: SearchQuery
               ) -> tuple[list[list[tuple[int, int]]], list[float], float]:
    """Each CJK term's (id, length) rows under the query's filters, its IDF and the average
    length: what ``cjk_scores`` weighs (and the C scorer, ``nativescore``)."""
    where, args = filters(query)
    # The collection size for IDF: the highest id (a count would cost a scan), scaled to what
    # the filters keep (rank.filtered_total), as the document frequencies are.
    total, average = _cjk_collection(conn)
    ask_lengths(conn, plan.cjk, query)
    postings = [_postings(conn, piece, query, where, args) for piece in plan.cjk]
    kept = [len(rows) for rows in postings]
    total = filtered_total(total, kept, [
        _unfiltered_count(conn, piece) for piece in plan.cjk] if where_narrows(query) else kept)
    return postings, [idf(total, len(rows)) for rows in postings], average


def cjk_scores(conn: sqlite3.Connection, plan: NaturalPlan,
               query: SearchQuery) -> tuple[dict[int, float], set[int]]:
    """BM25 (one occurrence) of every message holding any CJK term, and those holding all."""
    if not plan.cjk:
        return {}, set()
    postings, weights, average = cjk_pieces(conn, plan, query)
    scores: dict[int, float] = {}
    counts: dict[int, int] = {}
    for rows, weight in zip(postings, weights, strict=True):
        for rowid, length in rows:
            scores[rowid] = scores.get(rowid, 0.0) + weight * presence_weight(length, average)
            counts[rowid] = counts.get(rowid, 0) + 1
    return scores, {i for i, n in counts.items() if n == len(plan.cjk)}


def _glued_lookups(plan: NaturalPlan) -> list[tuple[str, str, list[str]]]:
    """(term, trigram MATCH, GLOB patterns on the padded lower-case text) for each word or
    chunk of ``plan`` that a CJK message may hold glued to its text (``plan.glued``: as a
    whole word, in ASCII any case or full-width: ``用pytest跑``, ``pytest跑``, ``ＡＰＩキー``,
    not ``用 pytest 跑``, a word of its own, nor the ``pyt`` of ``pytest``; ``plan.chunks``: as
    typed, any case, ``docker-compose.yml读取``). The term is how ``token_df`` and
    ``tokens_among`` name it: the word, or the chunk's words joined by spaces."""
    edge = f"[^0-9a-z{FULL_WIDTH}]"
    cjk = f"[{CJK_CLASS}]"
    out: list[tuple[str, str, list[str]]] = []
    for word in plan.glued:
        low, wide = word.lower(), (full_width(word.lower()), full_width(word.upper()))
        out.append((word, f'"{word}" OR "{full_width(word)}"', [
            p for form in (low, *wide) for p in (f"*{cjk}{form}{edge}*", f"*{edge}{form}{cjk}*")]))
    for term, chunk in plan.chunks:
        low = "".join(f"[{c}]" if c in "*?[" else c for c in chunk.lower())  # GLOB's own
        out.append((term, '"' + chunk.replace('"', '""') + '"',
                    [f"*{cjk}{low}{edge}*", f"*{edge}{low}{cjk}*"]))
    return out


def _possible_lookups(conn: sqlite3.Connection, plan: NaturalPlan
                      ) -> list[tuple[str, str, list[str]]]:
    """``_glued_lookups`` without the words no CJK message holds glued (``glued.py``: one
    read of a small table instead of a trigram lookup over every segment)."""
    lookups = _glued_lookups(plan)
    ruled = glued.ruled_out(conn, plan.glued) if plan.glued else set()
    return [found for found in lookups
            if not (found[0] in plan.glued and found[0].lower() in ruled)]


def _in_cjk_text(conn: sqlite3.Connection, lookups: list[tuple[str, str, list[str]]]) -> bool:
    """Does some CJK message hold one of the glued words or chunks at all? One indexed lookup
    for them all; the trigram index holds CJK messages only, so an archive without CJK
    answers at once."""
    return bool(lookups) and conn.execute(
        "SELECT 1 FROM messages_trigram WHERE messages_trigram MATCH ? LIMIT 1",
        [" OR ".join(match for _, match, _ in lookups)]).fetchone() is not None


def glued_exists(conn: sqlite3.Connection, plan: NaturalPlan) -> bool:
    """Does some CJK message hold one of the plan's words or chunks glued to its CJK text
    (``natural.glued_words``, ``natural.glued_chunks``)?"""
    lookups = _possible_lookups(conn, plan)
    if not _in_cjk_text(conn, lookups):
        return False
    everything = SearchQuery("glued", include_inactive=True)
    return any(_glued_rows(conn, match, patterns, everything, "", [], 1)
               for _, match, patterns in lookups)


def glued_scores(conn: sqlite3.Connection, plan: NaturalPlan, query: SearchQuery,
                 token_df: Callable[[str], int],
                 tokens_among: Callable[[str, list[int]], set[int]]) -> dict[int, float]:
    """The CJK messages holding a query word or chunk glued to their CJK text (``用pytest跑``,
    ``docker-compose.yml读取``, which the word index keeps as one token with its neighbours),
    each scored for that term as one occurrence (BM25: the term's IDF over every message
    holding it either way, the length factor of a CJK term). A message the word index already
    matches for the term (``tokens_among``) is left out: it is scored as a word.
    ``token_df(term)``: how many messages hold it as a word (a chunk: as a phrase)."""
    lookups = _possible_lookups(conn, plan)
    if not _in_cjk_text(conn, lookups):
        return {}
    where, args = filters(query)
    out: dict[int, float] = {}
    total, average = 0, 0.0
    for term, match, patterns in lookups:
        rows = _glued_rows(conn, match, patterns, query, where, args)
        if not rows:
            continue
        as_token = tokens_among(term, [int(r[0]) for r in rows])
        rows = [r for r in rows if int(r[0]) not in as_token]
        if not rows:
            continue
        if not total:
            total, average = _cjk_collection(conn)
        weight = idf(total, token_df(term) + len(rows))
        for rowid, length in rows:
            out[int(rowid)] = out.get(int(rowid), 0.0) + weight * presence_weight(length, average)
    return out


def _glued_rows(conn: sqlite3.Connection, match: str, patterns: list[str], query: SearchQuery,
                where: str, args: list[object], limit: int | None = None
                ) -> list[tuple[int, int]]:
    """(id, length) of the newest CJK messages holding a glued word or chunk
    (``_glued_lookups``): the trigram index finds the substring, GLOB on the text its edges
    (the text padded: its ends are edges)."""
    padded = "(' ' || lower(m.text) || ' ')"  # lower(): ASCII only, so full-width stays
    text = "(" + " OR ".join([f"{padded} GLOB ?"] * len(patterns)) + ")"
    if not where_narrows(query):  # lengths and the active flag from the narrow table
        active = "" if query.include_inactive else " AND l.active = 1"
        return conn.execute(
            f"SELECT l.id, l.chars FROM messages_trigram f JOIN {cjklen.TABLE} l ON l.id = f.rowid "
            f"JOIN messages m ON m.id = f.rowid WHERE messages_trigram MATCH ?{active} AND {text} "
            "ORDER BY f.rowid DESC LIMIT ?", [match, *patterns, limit or MAX_GLUED]).fetchall()
    return conn.execute(
        f"SELECT m.id, length(m.text) FROM messages_trigram f JOIN messages m ON m.id = f.rowid"
        f"{_join(query)} WHERE messages_trigram MATCH ?{where} AND {text} "
        "ORDER BY f.rowid DESC LIMIT ?", [match, *args, *patterns, limit or MAX_GLUED]).fetchall()


MAX_GLUED = 500  # the newest CJK messages holding a glued word that a search scores (each
# costs a read of its text; a word glued in more messages than this is common enough that the
# newest ones hold the best matches)


def _fts_df(conn: sqlite3.Connection, word: str) -> int:
    return int(conn.execute("SELECT count(*) FROM messages_fts WHERE messages_fts MATCH ?",
                            (Term((word,)).fts5(),)).fetchone()[0])


def _fts_tokens_among(conn: sqlite3.Connection, word: str, ids: list[int]) -> set[int]:
    return _matching(conn, Term((word,)).fts5(), set(ids))


def _day_span(conn: sqlite3.Connection) -> tuple[float, float]:
    """The archive's time span for days without a year: first session start to now."""
    first, last = conn.execute("SELECT min(started_at), (SELECT created_at FROM messages "
                               "ORDER BY id DESC LIMIT 1) FROM sessions").fetchone()
    now = time.time()
    return float(first if first is not None else now), max(float(last or 0.0), now)


def _day_condition(conn: sqlite3.Connection, plan: NaturalPlan) -> tuple[str, list[object]]:
    """SQL on ``m`` true for a message created on one of the plan's days, with arguments."""
    first, last = _day_span(conn)
    ranges = [r for day in plan.days for r in day_ranges(day, first, last)]
    if not ranges:
        return "0", []
    sql = " OR ".join("(m.created_at >= ? AND m.created_at < ?)" for _ in ranges)
    return f"({sql})", [bound for r in ranges for bound in r]


def day_scores(conn: sqlite3.Connection, plan: NaturalPlan,
               query: SearchQuery) -> dict[int, float]:
    """BM25 (one occurrence) of every message created on a day the query names, the days
    together one term: the day's messages, their lengths and active flags from the index on
    (created_at, length(text), active) (migration 21), not from each row."""
    if not plan.days:
        return {}
    rows = _day_rows(conn, plan, query)
    if not rows:
        return {}
    total = int(conn.execute("SELECT coalesce(max(id), 0) FROM messages").fetchone()[0])
    if where_narrows(query):
        condition, bounds = _day_condition(conn, plan)
        every = conn.execute(f"SELECT count(*) FROM messages m WHERE {condition}",
                             bounds).fetchone()[0]
        total = filtered_total(total, [len(rows)], [int(every)])
    average = float(conn.execute(
        "SELECT avg(length(text)) FROM (SELECT text FROM messages "
        "ORDER BY id DESC LIMIT 500)").fetchone()[0] or 1.0)
    weight = idf(total, len(rows))
    by_length = {length: weight * presence_weight(length, average)
                 for length in {row[1] for row in rows}}  # (a day's lengths repeat)
    return {int(i): by_length[length] for i, length in rows}


DAY_ROWS = ("SELECT m.id, length(m.text) FROM messages m{join} "
            "WHERE m.created_at >= ? AND m.created_at < ?{where}")


def _day_rows(conn: sqlite3.Connection, plan: NaturalPlan,
              query: SearchQuery) -> list[tuple[int, int]]:
    """(id, length) of each message created on one of the plan's days that the filters
    allow: a statement a day's range, each read from the index alone (an OR of the ranges,
    for a day named without its year, made SQLite read every row from the table)."""
    where, args = filters(query)
    first, last = _day_span(conn)
    found: dict[int, int] = {}
    for low, high in sorted({r for day in plan.days for r in day_ranges(day, first, last)}):
        found.update(conn.execute(DAY_ROWS.format(join=_join(query), where=where),
                                  [low, high, *args]).fetchall())
    return list(found.items())


def trim_days(days: dict[int, float], scored: Collection[int], limit: int) -> dict[int, float]:
    """``day_scores`` less the messages no other term scores (not in ``scored``) that cannot be
    among the best ``limit``. Those rank by their day score alone, all boosted alike (each
    holds every term, or none does), so the ``limit`` best of them, and any tied with the
    last, hold every one that can place: a crowded day's thousands are not summed, boosted
    and sorted for nothing."""
    alone = [score for i, score in days.items() if i not in scored]
    if len(alone) <= limit:
        return days
    bar = heapq.nlargest(max(1, limit), alone)[-1]
    return {i: score for i, score in days.items() if score >= bar or i in scored}


def newest_ids(conn: sqlite3.Connection, plan: NaturalPlan, query: SearchQuery,
               limit: int) -> list[int]:
    """The newest ``limit`` messages holding any term (``sort="recency"``): each index walked
    newest first and stopped at ``limit`` rows that pass the filters, so the cost follows the
    limit, not the number of matches (nothing is scored: the order is by id)."""
    where, args = filters(query)
    found: set[int] = set()
    queries: list[tuple[str, str, str, list[object]]] = []
    if plan.words:
        queries.append(("messages_fts", " OR ".join(t.fts5() for t in plan.words), "", []))
    queries.extend(cjk_index(piece) for piece in plan.cjk)
    for table, match, text, text_args in queries:
        found.update(int(r[0]) for r in conn.execute(
            f"SELECT m.id FROM {table} f JOIN messages m ON m.id = f.rowid{_join(query)} "
            f"WHERE {table} MATCH ?{where}{text} ORDER BY f.rowid DESC LIMIT ?",
            [match, *args, *text_args, limit]))
    if plan.days:
        condition, bounds = _day_condition(conn, plan)
        found.update(int(r[0]) for r in conn.execute(
            f"SELECT m.id FROM messages m{_join(query)} WHERE {condition}{where} "
            "ORDER BY m.id DESC LIMIT ?", [*bounds, *args, limit]))
    lookups = _possible_lookups(conn, plan)  # words and chunks glued in CJK text, newest first
    if _in_cjk_text(conn, lookups):
        for _, match, patterns in lookups:
            found.update(int(r[0]) for r in _glued_rows(conn, match, patterns, query, where,
                                                        args, limit))
    return sorted(found, reverse=True)[:limit]


def natural_scores(conn: sqlite3.Connection, plan: NaturalPlan, query: SearchQuery,
                   limit: int, *, scan: bool = False) -> dict[int, float]:
    """Matching message ids with their boosted scores: enough of the best ones to hold the
    true top ``limit`` (the word impact index, or FTS5 for a relevance-ranked query of words
    only), else every match. ``scan``: FTS5 over every match (the reference the tests hold
    the faster paths to)."""
    if not scan:
        fast = fast_scores(conn, plan, query, limit)
        if fast is None:
            fast = cjk_best(conn, plan, query, limit)
        if fast is not None:
            return fast
    budget = (max(200, limit * 4) if query.sort == "relevance" and not plan.cjk
              and not plan.days and not scan else None)
    words, every_word, phrase = word_scores(conn, plan, query, budget)
    cjk, every_cjk = cjk_scores(conn, plan, query)
    cjk = _plus(cjk, glued_scores(conn, plan, query, lambda w: _fts_df(conn, w),
                                  lambda w, ids: _fts_tokens_among(conn, w, ids)))
    days = day_scores(conn, plan, query)
    if not scan:
        days = trim_days(days, words.keys() | cjk.keys(), limit)
    out: dict[int, float] = {}
    for rowid in words.keys() | cjk.keys() | days.keys():
        has_all = ((not plan.words or rowid in every_word)
                   and (not plan.cjk or rowid in every_cjk) and (not days or rowid in days))
        out[rowid] = boosted(words.get(rowid, 0.0) + cjk.get(rowid, 0.0) + days.get(rowid, 0.0),
                             has_all=has_all, has_phrase=rowid in phrase)
    return out


def _plus(scores: dict[int, float], more: dict[int, float]) -> dict[int, float]:
    """``scores`` with ``more`` added (a new dict when ``more`` has anything)."""
    if not more:
        return scores
    out = dict(scores)
    for rowid, score in more.items():
        out[rowid] = out.get(rowid, 0.0) + score
    return out


MAX_FAST_FETCH = 20_000  # candidates the word impact index widens to before leaving it to FTS5


def allowed_ids(conn: sqlite3.Connection, ids: list[int], query: SearchQuery) -> set[int]:
    """The ids among ``ids`` that pass the query's filters. With no filter but the default
    (active rows only) the rewound rows are read from their own small index, not each
    candidate's row: on a cold cache that is a page read or two instead of one per
    candidate."""
    if not ids:
        return set()
    where, args = filters(query)
    if not where:  # include_inactive and nothing else: every indexed id is a message
        return set(ids)
    if where == " AND m.active = 1" and not args:
        rewound = conn.execute(
            "SELECT id FROM messages INDEXED BY messages_inactive "
            "WHERE active = 0 AND id BETWEEN ? AND ?", (min(ids), max(ids)))
        return set(ids).difference(int(r[0]) for r in rewound)
    out: set[int] = set()
    for start in range(0, len(ids), 900):
        part = ids[start:start + 900]
        marks = ",".join("?" * len(part))
        out.update(int(r[0]) for r in conn.execute(
            f"SELECT m.id FROM messages m{_join(query)} WHERE m.id IN ({marks}){where}",
            [*part, *args]))
    return out


def _phrases(conn: sqlite3.Connection, plan: NaturalPlan, ids: list[int]) -> set[int]:
    """The ids among ``ids`` holding an adjacent pair of the query's words as a phrase
    (tokenized by FTS5 in memory: the word index's own phrase test, on these rows only)."""
    if not plan.pairs or not ids:
        return set()
    match = " OR ".join(f'"{a} {b}"' for a, b in plan.pairs)
    if len(ids) > 2000:
        return _matching(conn, match, set(ids))
    rows: list[tuple[int, str]] = []
    for start in range(0, len(ids), 900):
        part = ids[start:start + 900]
        marks = ",".join("?" * len(part))
        rows.extend(conn.execute(f"SELECT id, text FROM messages WHERE id IN ({marks})", part))
    return wordindex.tokenizer().matching(rows, match)


PHRASE_BATCH = 40  # rows read per step of the phrase test, best upper bound first
# The phrase test asks the FTS5 index (one phrase query over every candidate) instead of
# reading candidates' text when its words' postings are few enough: it reads about
# 8 + postings / 1000 pages (cold) where the text test reads ~1.5 pages a row, at least a
# batch of rows; measured at a million messages, bench/bench_store.py
PHRASE_INDEX_PAGES = 8.0
PHRASE_INDEX_POSTINGS_PER_PAGE = 1000.0
PHRASE_TEXT_PAGES_PER_ROW = 1.5


def phrase_by_index(phrase_postings: int | None, candidates: int, limit: int) -> bool:
    """Is one FTS5 phrase query over all the candidates cheaper than reading the text of the
    first batch of them? ``phrase_postings``: the pair words' document counts added up (None:
    unknown, a pair word that is not a term of its own)."""
    if phrase_postings is None:
        return False
    rows = min(candidates, max(PHRASE_BATCH, limit))
    index_pages = PHRASE_INDEX_PAGES + phrase_postings / PHRASE_INDEX_POSTINGS_PER_PAGE
    return index_pages < rows * PHRASE_TEXT_PAGES_PER_ROW


def _top_exact(ids: Any, final: Any, limit: int) -> dict[int, float]:
    """The ``limit`` best of exact scores ``final`` and every score tied with the last."""
    import numpy as np

    if len(final) > limit:
        keep = final >= np.partition(final, -limit)[-limit]
        ids, final = ids[keep], final[keep]
    return dict(zip([int(i) for i in ids], final.tolist(), strict=True))


def _best_boosted(conn: sqlite3.Connection, plan: NaturalPlan, ids: Any, scores: Any,
                  every: Any, upper: Any, limit: int,
                  phrase_postings: int | None = None, could: Any = None) -> dict[int, float]:
    """The boosted scores of ``ids`` (their word scores, whether each holds every term, and
    each one's score if it held a phrase too), exact for every id that can be among the best
    ``limit``. The phrase test reads each row's text, so the rows go best upper bound first and
    stop once the ``limit``-th exact score is above every bound left: on a cold cache the rows
    that cannot place are never read, nor those that cannot hold a phrase (``could``: which
    of ``ids`` hold both words of a pair, as ``upper`` assumes; None: any may). When the pair
    words' postings are few (``phrase_by_index``), one FTS5 phrase query answers for every
    candidate instead."""
    import numpy as np

    if not plan.pairs:  # no phrase to test: every exact score at once (rank.boosted)
        return _top_exact(ids, scores * np.where(every, 1.0 + BOOST_ALL, 1.0), limit)
    if could is None:
        could = np.ones(len(ids), dtype=bool)
    if phrase_by_index(phrase_postings, int(np.count_nonzero(could)), limit):
        listed = [int(i) for i in ids]
        match = " OR ".join(f'"{a} {b}"' for a, b in plan.pairs)
        held = _matching(conn, match, set(listed))
        in_phrase = np.fromiter((i in held for i in listed), dtype=bool, count=len(listed))
        # rank.boosted elementwise, in its order of operations
        final = scores * (1.0 + np.where(every, BOOST_ALL, 0.0)
                          + np.where(in_phrase, BOOST_PHRASE, 0.0))
        return _top_exact(ids, final, limit)
    order = np.argsort(-upper, kind="stable")
    out: dict[int, float] = {}
    best: list[float] = []  # the limit best exact scores so far (a min-heap)
    step = max(PHRASE_BATCH, limit)
    for start in range(0, len(order), step):
        if len(best) >= limit and float(upper[order[start]]) < best[0]:
            break  # nothing left can reach the limit-th best (ties go on: recency breaks them)
        part = order[start:start + step]
        batch = [int(i) for i in ids[part]]
        phrase = _phrases(conn, plan, [i for i, c in zip(batch, could[part].tolist(),
                                                         strict=True) if c])
        for i, score, all_terms in zip(batch, scores[part].tolist(), every[part].tolist(),
                                       strict=True):
            out[i] = exact = boosted(score, has_all=all_terms, has_phrase=i in phrase)
            if len(best) < limit:
                heapq.heappush(best, exact)
            elif exact > best[0]:
                heapq.heapreplace(best, exact)
    return out


def _merged(np: Any, words: wordindex.WordScores, plan: NaturalPlan, cjk: dict[int, float],
            every_cjk: set[int], days: dict[int, float]) -> tuple[Any, Any, Any]:
    """Word, CJK and day scores over one id space: (total, holds every term, matches any)."""
    size = max(len(words.raw), max(cjk, default=-1) + 1, max(days, default=-1) + 1)
    total = np.zeros(size)
    total[:len(words.raw)] = words.raw
    held = np.zeros(size, dtype=bool)
    held[:len(words.count)] = words.count == len(plan.words)
    matched = np.zeros(size, dtype=bool)
    matched[:len(words.count)] = words.count > 0
    for extra in (cjk, days):  # (words + cjk) + days, as natural_scores adds them
        if extra:
            ids = np.fromiter(extra.keys(), dtype=np.int64, count=len(extra))
            total[ids] = total[ids] + np.fromiter(extra.values(), dtype=np.float64,
                                                  count=len(extra))
            matched[ids] = True
    if plan.cjk:
        keep = np.zeros(size, dtype=bool)
        if every_cjk:
            keep[np.fromiter(every_cjk, dtype=np.int64, count=len(every_cjk))] = True
        held &= keep
    if days:
        keep = np.zeros(size, dtype=bool)
        keep[np.fromiter(days.keys(), dtype=np.int64, count=len(days))] = True
        held &= keep
    return total, held, matched


def fast_scores(conn: sqlite3.Connection, plan: NaturalPlan, query: SearchQuery,
                limit: int) -> dict[int, float] | None:
    """``natural_scores`` through the word impact index (``wordindex.py``): the same scores
    for the messages that can be among the best ``limit``, or None when the index cannot
    answer (then FTS5 does).

    Every message's word score comes from the index at once; CJK and day terms add theirs as
    on the FTS5 path. The phrase boost is tested only where it could matter: with ``lower``
    a message's score without it and ``upper`` with it, the ``limit``-th best ``lower`` is a
    bar no message whose ``upper`` is under it can reach, so only the rest are loaded."""
    if not plan.words or any(t.prefix for t in plan.words):
        return None
    through = watermark(conn)
    asked = [(" ".join(t.words), t.fts5()) for t in plan.words]
    gathered = wordindex.gather(conn, asked, through)
    if gathered is None:
        return None
    if nativescore.enabled() and nativescore.suits(plan, query, gathered):
        return nativescore.fast_scores(conn, plan, query, limit, gathered)  # the C scorer
    if plainscore.use_plain(gathered):  # few postings: no NumPy (its import costs more)
        return plainscore.fast_scores(conn, plan, query, limit, gathered)
    words = wordindex.word_scores(conn, asked, through, gathered)
    if words is None:
        return None
    import numpy as np

    cjk, every_cjk = cjk_scores(conn, plan, query)
    if plan.glued or plan.chunks:  # the index's own postings say who holds each as a token
        number = {" ".join(t.words): n for n, t in enumerate(plan.words)}

        def among(word: str, ids: list[int]) -> set[int]:
            found = np.asarray(ids, dtype=np.int64)
            return set(found[words.holding(number[word], found)].tolist())

        cjk = _plus(cjk, glued_scores(conn, plan, query,
                                      lambda w: len(words.held[number[w]]), among))
    days = day_scores(conn, plan, query)
    terms = len(plan.words)
    top = 1.0 + BOOST_ALL + (BOOST_PHRASE if plan.pairs else 0.0)  # the largest boost
    if cjk or days:
        total, held, matched = _merged(np, words, plan, cjk, every_cjk, days)
    else:  # words only: no pass over the id space beyond the index's own
        total, held, matched = words.raw, None, None

    def holds(ids: Any) -> Any:
        return held[ids] if held is not None else words.count[ids] == terms

    def lower(ids: Any) -> Any:
        return total[ids] * np.where(holds(ids), 1.0 + BOOST_ALL, 1.0)

    position = {" ".join(t.words).lower(): n for n, t in enumerate(plan.words)}
    pairs = [(position.get(a), position.get(b)) for a, b in plan.pairs]

    def could_phrase(ids: Any) -> Any:
        """Which of ``ids`` hold both words of some pair (a phrase needs both; a pair whose
        word is not a term of its own may be anywhere)."""
        out = np.zeros(len(ids), dtype=bool)
        for a, b in pairs:
            if a is None or b is None:
                return np.ones(len(ids), dtype=bool)
            out |= words.holding(a, ids) & words.holding(b, ids)
        return out

    def upper(ids: Any) -> Any:
        if not plan.pairs:
            return lower(ids)
        every = holds(ids)
        return total[ids] * np.where(
            could_phrase(ids),
            np.where(every, 1.0 + BOOST_ALL + BOOST_PHRASE, 1.0 + BOOST_PHRASE),
            np.where(every, 1.0 + BOOST_ALL, 1.0))

    pair_terms = {n for pair in pairs for n in pair}
    phrase_postings: int | None = None  # the pair words' postings (phrase_by_index)
    if pair_terms and None not in pair_terms:
        phrase_postings = sum(len(words.held[n]) for n in pair_terms if n is not None)

    def kth(values: Any, k: int) -> float:
        return -math.inf if len(values) < k else float(np.partition(values, -k)[-k])

    if query.session_id is not None:  # one session: score exactly the rows it allows
        where, args = filters(query)
        rows = conn.execute(f"SELECT m.id FROM messages m{_join(query)} WHERE 1{where}",
                            args).fetchall()
        inside = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        inside = inside[inside < len(total)]
        candidates = inside[(matched[inside] if matched is not None
                             else words.count[inside] > 0)]
        bar = kth(lower(candidates), max(1, limit))
        chosen = candidates[upper(candidates) >= bar]
        return _best_boosted(conn, plan, chosen, total[chosen], holds(chosen), upper(chosen),
                             limit, phrase_postings, could_phrase(chosen))
    want = max(1, limit)
    while True:
        seed = words.seed if matched is None else None
        if seed is not None and len(seed) >= want:
            bar = kth(lower(seed), want)  # a lower bound of the want-th best score
            # every message whose boosted score can reach the bar (a hair wider than the
            # division: the exact test on the boosted scores follows)
            candidates = np.flatnonzero(total >= bar / top * (1.0 - 1e-9))
        else:
            candidates = np.flatnonzero(matched if matched is not None else words.count > 0)
            bar = -math.inf
        bar = max(bar, kth(lower(candidates), want))
        chosen = candidates[upper(candidates) >= bar]
        ids = [int(i) for i in chosen]
        allowed = allowed_ids(conn, ids, query)
        kept = chosen[np.fromiter((i in allowed for i in ids), dtype=bool, count=len(ids))]
        out = _best_boosted(conn, plan, kept, total[kept], holds(kept), upper(kept), limit,
                            phrase_postings, could_phrase(kept))
        if len(out) >= limit and sorted(out.values())[-limit] >= bar:
            return out
        everything = int(np.count_nonzero(matched if matched is not None else words.count))
        if len(chosen) == everything or want >= MAX_FAST_FETCH:
            return out if len(chosen) == everything else None
        want = min(want * 4, MAX_FAST_FETCH)
