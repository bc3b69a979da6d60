"""Natural-language search on PostgreSQL: ORed weighted terms ranked by BM25 over every match.

The twin of ``refold.store.sqlite.natural``, in one SQL statement: each term is a condition
(a word: ``tsv @@ tsquery``, stemmed by the ``refold_search`` configuration; a CJK piece of 1–2
characters: the gram array; 3+: ``LIKE`` through the trigram index, so CJK terms stay exact
substrings; a digit or letter joined to a CJK letter, ``6号``: the letter's gram and a regular
expression, as SQLite reads the text). Each term weighs its BM25 IDF, counted on the rows the
filters allow (the collection size scaled to match: ``rank.filtered_total``); a message
scores the weights of the terms it holds times BM25's length factor for one occurrence
(PostgreSQL's text search gives presence, not term counts), boosted when it holds every term
or an adjacent pair of the query's words as a phrase (``refold.search.rank``). A day the
query names is one more term: created that day (``created_at`` is indexed). Every match is
scored; ties go to the newest row.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from typing import Any

from refold.search.dates import day_ranges
from refold.search.natural import (
    FULL_WIDTH,
    GLUED_MARK,
    SHORT_SPAN_EDGE,
    NaturalPlan,
    short_span,
)
from refold.search.query import CJK_CLASS, Term, is_gram_needle
from refold.search.rank import BOOST_ALL, BOOST_PHRASE, K1, B, filtered_total, idf
from refold.store.postgres.core import Cursor
from refold.store.titles import like_escape


def _lexeme(word: str) -> str:
    return f"'{word}'"  # words are letters and digits only (parse_query guarantees it)


def _word_condition(term: Term) -> tuple[str, tuple[Any, ...]]:
    body = " <-> ".join(_lexeme(w) for w in term.words)
    return "m.tsv @@ to_tsquery('refold_search', %s)", (body,)


def _cjk_condition(piece: str) -> tuple[str, tuple[Any, ...]]:
    if short_span(piece):  # "6号": its CJK letter's gram, then the span, not after a digit
        return ("(m.cjk_grams @> %s::text[] AND m.search_text ~* %s)",
                ([piece[1]], f"(^|[^{SHORT_SPAN_EDGE}]){piece}"))
    if is_gram_needle(piece):
        return "m.cjk_grams @> %s::text[]", ([piece],)
    return "m.search_text LIKE %s", ("%" + like_escape(piece) + "%",)


def _day_condition(cur: Cursor, plan: NaturalPlan) -> tuple[str, tuple[Any, ...]] | None:
    """Created on one of the plan's days (the span for days without a year: the first
    session's start to now, as on SQLite)."""
    if not plan.days:
        return None
    cur.execute("SELECT min(started_at), (SELECT created_at FROM messages ORDER BY id DESC "
                "LIMIT 1) FROM sessions")
    row = cur.fetchone()
    now = time.time()
    first = float(row[0]) if row and row[0] is not None else now
    last = max(float(row[1]) if row and row[1] is not None else 0.0, now)
    ranges = [r for day in plan.days for r in day_ranges(day, first, last)]
    if not ranges:
        return None
    sql = " OR ".join("(m.created_at >= %s AND m.created_at < %s)" for _ in ranges)
    return f"({sql})", tuple(bound for r in ranges for bound in r)


def conditions(cur: Cursor, plan: NaturalPlan) -> list[tuple[str, tuple[Any, ...]]]:
    """One (SQL condition, arguments) per term: words, CJK pieces, then the days."""
    out = [_word_condition(t) for t in plan.words] + [_cjk_condition(p) for p in plan.cjk]
    day = _day_condition(cur, plan)
    return out if day is None else [*out, day]


def _glued_condition(word: str) -> tuple[str, tuple[Any, ...]]:
    """A CJK message holding ``word`` glued to a CJK letter (``用pytest跑``: one token in
    ``tsv``; its grams hold ``~pytest``, ``codec.cjk_gram_list``), and not also as a token of
    its own (then the word's own term scores it)."""
    return ("(m.cjk_grams @> %s::text[] AND NOT m.tsv @@ to_tsquery('refold_search', %s))",
            (_glued_marks([word]), _lexeme(word)))


def _glued_marks(words: Sequence[str]) -> list[str]:
    return [GLUED_MARK + word.lower() for word in words]


_EDGE = f"[^0-9a-z{FULL_WIDTH}]"


def _chunk_glued(chunk: str) -> tuple[str, tuple[Any, ...]]:
    """A CJK message holding ``chunk`` (``docker-compose.yml``, any case) glued to a CJK letter
    (``docker-compose.yml读取``: its last word is one token with the CJK text, so the phrase
    misses it): the trigram index finds the substring, a regular expression its edges (as
    SQLite's GLOB does)."""
    body = re.escape(chunk)
    pattern = f"[{CJK_CLASS}]{body}({_EDGE}|$)|(^|{_EDGE}){body}[{CJK_CLASS}]"
    return ("(m.cjk_grams IS NOT NULL AND m.search_text ILIKE %s AND m.search_text ~* %s)",
            ("%" + like_escape(chunk) + "%", pattern))


def _chunk_condition(term: str, chunk: str) -> tuple[str, tuple[Any, ...]]:
    """``_chunk_glued``, and not also holding the phrase ``term`` (then the term scores it)."""
    sql, args = _chunk_glued(chunk)
    phrase = " <-> ".join(_lexeme(w) for w in term.split(" "))
    return f"({sql} AND NOT m.tsv @@ to_tsquery('refold_search', %s))", (*args, phrase)


def _chunk_exists(cur: Cursor, chunk: str) -> bool:
    sql, args = _chunk_glued(chunk)
    cur.execute(f"SELECT count(*) FROM messages m WHERE {sql}", args, prepare=False)
    row = cur.fetchone()
    return bool(row and row[0])


def glued_exists(cur: Cursor, plan: NaturalPlan) -> bool:
    """Does some CJK message hold one of the plan's words (one lookup in the grams' GIN index)
    or chunks (the trigram index) glued to its CJK text?"""
    return _words_glued(cur, plan.glued) or any(_chunk_exists(cur, c) for _, c in plan.chunks)


def _words_glued(cur: Cursor, words: tuple[str, ...]) -> bool:
    if not words:
        return False
    # a count, not EXISTS: under EXISTS (LIMIT 1) the planner bets on a sequential scan
    # finding a row at once, which reads the whole table when none is there
    cur.execute("SELECT count(*) FROM messages m WHERE m.cjk_grams && %s::text[]",
                (_glued_marks(words),), prepare=False)
    row = cur.fetchone()
    return bool(row and row[0])


def _weights(cur: Cursor, terms: list[tuple[str, tuple[Any, ...]]], where: list[str],
             args: list[Any], glued: Sequence[tuple[int, tuple[str, tuple[Any, ...]]]] = ()
             ) -> tuple[list[float], list[float]]:
    """Each term's IDF, and each glued condition's: the IDF of its word (``terms`` index) over
    the messages holding it either way."""
    cur.execute("SELECT coalesce(max(id), 0) FROM messages")
    row = cur.fetchone()
    total = int(row[0]) if row else 0
    kept = [_count(cur, sql, arg, where, args) for sql, arg in terms]
    more = [_count(cur, sql, arg, where, args) for _, (sql, arg) in glued]
    if any(w != "m.active" for w in where):  # filters narrow the collection: scale its size
        total = filtered_total(total, kept, [_count(cur, sql, arg, [], []) for sql, arg in terms])
    return ([idf(total, df) if df else 0.0 for df in kept],
            [idf(total, kept[i] + df) if df else 0.0
             for (i, _), df in zip(glued, more, strict=True)])


def _count(cur: Cursor, sql: str, arg: tuple[Any, ...], where: list[str],
           args: list[Any]) -> int:
    join = " JOIN sessions s ON s.id = m.session_id" if where else ""
    cur.execute(f"SELECT count(*) FROM messages m{join} WHERE {' AND '.join([sql, *where])}",
                (*arg, *args), prepare=False)
    found = cur.fetchone()
    return int(found[0]) if found else 0


def _average_length(cur: Cursor) -> float:
    cur.execute("SELECT avg(length(search_text)) FROM (SELECT search_text FROM messages "
                "ORDER BY id DESC LIMIT 500) t")
    row = cur.fetchone()
    return float(row[0]) if row and row[0] else 1.0


def ranked_ids(cur: Cursor, plan: NaturalPlan, where: list[str], args: list[Any],
               limit: int, *, recency: bool) -> list[tuple[int, float]]:
    """(message id, score) of the best ``limit`` matches (or the newest, ``recency``)."""
    terms = conditions(cur, plan)
    number = {" ".join(t.words): n for n, t in enumerate(plan.words)}
    glued_words = [w for w in plan.glued if w in number] \
        if _words_glued(cur, plan.glued) else []  # (an archive without CJK: none, at once)
    chunks = [(number[t], _chunk_condition(t, c)) for t, c in plan.chunks if t in number]
    glued = [*((number[w], _glued_condition(w)) for w in glued_words), *chunks]
    weights, glued_weights = _weights(cur, terms, where, args, glued)
    if plan.days and terms and weights[-1] == 0.0:  # no message from that day: no day term
        terms, weights = terms[:-1], weights[:-1]
    average = _average_length(cur)
    every = " AND ".join(f"({sql})" for sql, _ in terms)  # (a glued word holds no term)
    every_args = [a for _, arg in terms for a in arg]
    scored = [*terms, *(cond for _, cond in glued)]  # the glued: one occurrence of its word
    weights = [*weights, *glued_weights]
    held = [f"coalesce(({sql})::int, 0)" for sql, _ in scored]  # cjk_grams is NULL without CJK
    score = " + ".join(f"{w!r} * {h}" for w, h in zip(weights, held, strict=True))
    boost = f"1 + {BOOST_ALL!r} * coalesce(({every})::int, 0)"
    term_args = [a for _, arg in scored for a in arg]
    boost_args = list(every_args)
    if plan.pairs:
        boost += f" + {BOOST_PHRASE!r} * (m.tsv @@ to_tsquery('refold_search', %s))::int"
        boost_args.append(" | ".join(f"({_lexeme(a)} <-> {_lexeme(b)})" for a, b in plan.pairs))
    norm = f"{K1 + 1!r} / (1 + {K1!r} * (1 - {B!r} + {B!r} * length(m.search_text) / {average!r}))"
    # which rows to score: every term's condition; for the glued words, only their index
    # lookup (the grams' GIN index; the scores above leave out a row holding one as a token)
    match = " OR ".join([*(f"({sql})" for sql, _ in terms),
                         *(["m.cjk_grams && %s::text[]"] if glued_words else []),
                         *(sql for _, (sql, _) in chunks)])
    match_args = [*(a for _, arg in terms for a in arg),
                  *([_glued_marks(glued_words)] if glued_words else []),
                  *(a for _, (_, arg) in chunks for a in arg)]
    order = "m.id DESC" if recency else "score DESC, m.id DESC"
    cur.execute(f"""SELECT m.id, ({score}) * {norm} * ({boost}) AS score
                    FROM messages m JOIN sessions s ON s.id = m.session_id
                    WHERE ({match}){''.join(' AND ' + w for w in where)}
                    ORDER BY {order} LIMIT %s""",
                (*term_args, *boost_args, *match_args, *args, limit), prepare=False)
    return [(int(r[0]), float(r[1])) for r in cur.fetchall()]
