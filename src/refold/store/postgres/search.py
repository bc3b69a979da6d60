"""Search on PostgreSQL: tsvector for Latin text; pg_trgm and a CJK gram index for CJK text.

The query is sanitized by ``refold.search.query.parse_query`` (shared with SQLite); this module
only turns its plan into SQL, always with bound parameters, so no user input is ever SQL or
tsquery syntax:

- ``fts``: a tsquery built from the sanitized words (each word a quoted lexeme; phrases with
  ``<->``; ``word*`` as ``:*``), matched against the generated ``tsv`` column (GIN index),
  ranked by ``ts_rank_cd``. The text search configuration ``refold_search`` (created by the
  migrations) uses the original Porter stemmer and keeps stop words, like SQLite's FTS5
  ``porter unicode61``; a query left without lexemes falls back to the substring path.
- ``trigram``: ``LIKE '%needle%'`` (``ILIKE`` when the needle has case) on ``search_text``,
  which the ``gin_trgm_ops`` index answers for needles of 3+ characters; shorter needles and
  exclusions are checked with ``strpos`` on those rows.
- ``grams``: 1–2 letter CJK needles, which no trigram can answer: the GIN index over each row's
  CJK unigrams and bigrams (``cjk_grams``, the same grams SQLite indexes) finds the candidates,
  ``strpos`` re-checks every needle, so the answer is exact and every containing row is found.
- OR-groups mixing scripts: each group through its own path, merged newest first.
- ``scan``: the rest with CJK (a needle mixing CJK and Latin letters in one word): ``strpos`` over
  growing id ranges, newest first, stopping at the limit or the row/time caps.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

from refold import _records as records
from refold.search.natural import NaturalPlan
from refold.search.query import (
    TRIGRAM_MIN_CHARS,
    ParsedQuery,
    Term,
    is_gram_needle,
    make_snippet,
    parse_query,
)
from refold.search.rank import Roots, collapse_copies, titles_first, verbatim_first
from refold.store.base import SearchHit, SearchQuery, StoredMessage
from refold.store.postgres.core import MESSAGE_COLS, Cursor, message_from_row
from refold.store.postgres.ledger import LedgerMixin
from refold.store.postgres.natural import glued_exists, ranked_ids
from refold.store.titles import like_escape

log = logging.getLogger(__name__)

SCAN_FIRST_CHUNK = 2_000  # ids in the first scan step (doubling from there)
SCAN_CHUNK = 100_000  # ids per scan step at most
SCAN_ROW_CAP = 5_000_000  # ids a scan visits at most
SCAN_TIME_CAP = 2.0  # seconds a scan runs at most (as SQLite's scan budget)
MAX_LIMIT = 500
MAX_FETCH = 20_000  # rows fetched at most to fill ``limit`` hits after copies collapse
RANK_CANDIDATES = 2_000  # newest word matches relevance ranks (as SQLite's window)

_HIT_COLS = "m.id, m.session_id, m.seq, m.role, m.body, m.search_text, m.created_at, s.title"


def _lexeme(word: str, prefix: bool) -> str:
    # Words are letters and digits only (parse_query guarantees it), so quoting is trivial.
    return f"'{word}'" + (":*" if prefix else "")


def _term_tsquery(term: Term) -> str:
    last = len(term.words) - 1
    body = " <-> ".join(_lexeme(w, term.prefix and i == last) for i, w in enumerate(term.words))
    body = f"({body})" if len(term.words) > 1 else body
    return f"!{body}" if term.negated else body


def tsquery_text(parsed: ParsedQuery) -> str:
    """The query as ``to_tsquery`` input: OR of AND-groups of (maybe phrase) lexemes."""
    groups = [" & ".join(_term_tsquery(t) for t in group) for group in parsed.groups]
    return " | ".join(f"({g})" for g in groups)


def _contains(needle: str, *, indexed: bool, negate: bool = False) -> tuple[str, str]:
    """A substring test and its argument.

    ``indexed``: LIKE / ILIKE, which the trigram index answers (3+ characters). Otherwise
    ``strpos``: several times cheaper per row than ILIKE on CJK text, which has no case to fold.
    """
    caseless = needle.lower() == needle.upper()
    if indexed:
        op = ("NOT " if negate else "") + ("LIKE" if caseless else "ILIKE")
        return f"m.search_text {op} %s", "%" + like_escape(needle) + "%"
    column, value = ("m.search_text", "%s") if caseless else ("lower(m.search_text)", "lower(%s)")
    return f"strpos({column}, {value}) {'=' if negate else '>'} 0", needle


def _substring_condition(parsed: ParsedQuery, *, indexed: bool) -> tuple[str, list[Any]]:
    ors, args = [], []
    for must, must_not in parsed.substring_groups():
        parts = []
        for needle, negate in [(n, False) for n in must] + [(n, True) for n in must_not]:
            sql, arg = _contains(needle, indexed=indexed and not negate
                                 and len(needle) >= TRIGRAM_MIN_CHARS, negate=negate)
            parts.append(sql)
            args.append(arg)
        ors.append("(" + " AND ".join(parts) + ")")
    return "(" + " OR ".join(ors) + ")", args


def _index_condition(parsed: ParsedQuery, mode: str) -> tuple[str, list[Any]]:
    """One group through an index: trigram LIKE on 3+ letter needles, or the CJK gram array
    for 1–2 letter ones; every needle is then re-checked as a substring (exact answers)."""
    if mode == "trigram":
        return _substring_condition(parsed, indexed=True)
    must, must_not = parsed.substring_groups()[0]
    grams = list(dict.fromkeys(n for n in must if is_gram_needle(n)))
    parts: list[str] = ["m.cjk_grams @> %s::text[]"]
    args: list[Any] = [grams]
    for needle, negate in [(n, False) for n in must] + [(n, True) for n in must_not]:
        sql, arg = _contains(needle, indexed=False, negate=negate)
        parts.append(sql)
        args.append(arg)
    return "(" + " AND ".join(parts) + ")", args


def _filters(query: SearchQuery) -> tuple[list[str], list[Any]]:
    where: list[str] = []
    args: list[Any] = []
    for column, value in (("m.session_id", query.session_id), ("m.role", query.role),
                          ("s.source", query.source), ("s.owner", query.owner)):
        if value is not None:
            where.append(f"{column} = %s")
            args.append(value)
    if query.since is not None:
        where.append("m.created_at >= %s")
        args.append(query.since)
    if query.until is not None:
        where.append("m.created_at <= %s")
        args.append(query.until)
    if not query.include_inactive:
        where.append("m.active")
    if query.exclude_session_id is not None:
        where.append("m.session_id <> %s")
        args.append(query.exclude_session_id)
    return where, args


class SearchMixin(LedgerMixin):
    """Search; builds on the ledger for the window of messages around each hit.

    Search statements are never server-prepared (``prepare=False``): a cached generic plan
    cannot see the pattern, and for LIKE/tsquery it often gives up the trigram or GIN index.
    """

    def search(self, query: SearchQuery) -> list[SearchHit]:
        parsed = parse_query(query.text)
        if parsed.is_empty:
            return []
        limit = max(1, min(int(query.limit), MAX_LIMIT))
        with self._tx("search") as cur:
            if parsed.glued is not None and glued_exists(cur, parsed.glued):
                # one word some CJK message holds glued to its text: searched both ways
                parsed = records.replace(parsed, natural=parsed.glued)
            # Extra rows, so copies collapsing into one hit still leave ``limit`` hits; more
            # (4x each time) while copies leave fewer and the index may hold more.
            fetch = limit * 2 + 10
            while True:
                rows = self._search_rows(cur, parsed, query, fetch)
                hits = [self._hit(row, parsed, []) for row in rows]
                hits = collapse_copies(hits, self._lineage_roots(
                    cur, {h.session_id for h in hits}))
                if len(hits) >= limit or len(rows) < fetch or fetch >= MAX_FETCH:
                    break
                fetch = min(fetch * 4, MAX_FETCH)
            by_key = {(r[1], r[2]): r for r in rows}
            if query.sort != "recency":  # a pasted line finds the message it came from first
                hits = verbatim_first(hits, query.text)
            hits = titles_first(hits, _title_needles(parsed))[:limit]
            kept = [by_key[(h.session_id, h.seq)] for h in hits]
            windows = self._windows(cur, kept, query)
        return [records.replace(h, window=w) for h, w in zip(hits, windows, strict=True)]

    def lineage_roots(self, session_ids: Iterable[str]) -> dict[str, str]:
        with self._tx("lineage_roots") as cur:
            return self._lineage_roots(cur, set(session_ids))

    def _lineage_roots(self, cur: Cursor, session_ids: set[str]) -> dict[str, str]:
        """Each session's root ancestor (itself when it has no parent)."""
        if not session_ids:
            return {}
        cur.execute("""WITH RECURSIVE up(start, id, parent, depth, kind) AS (
                           SELECT id, id, parent_session_id, 0, link_kind FROM sessions
                           WHERE id = ANY(%s::text[])
                           UNION ALL SELECT up.start, s.id, s.parent_session_id, up.depth + 1,
                                            up.kind
                           FROM sessions s JOIN up ON s.id = up.parent WHERE up.depth < 1000)
                       SELECT start, id, kind FROM up WHERE parent IS NULL""",
                    (list(session_ids),))
        rows = cur.fetchall()
        return Roots(((str(start), str(root)) for start, root, _ in rows),
                     side=(str(start) for start, _, kind in rows if kind == "side"))

    def _search_rows(self, cur: Cursor, parsed: ParsedQuery, query: SearchQuery,
                     limit: int) -> list[tuple[Any, ...]]:
        where, args = _filters(query)
        mode = parsed.mode
        if mode == "natural":
            assert parsed.natural is not None  # mode == "natural" guarantees it
            return self._natural_rows(cur, parsed.natural, where, args, query, limit)
        if mode == "fts":
            text = tsquery_text(parsed)
            cur.execute("SELECT numnode(to_tsquery('refold_search', %s))", (text,))
            row = cur.fetchone()
            if row and row[0] > 0:
                return self._fts_rows(cur, text, where, args, query, limit)
        elif mode in ("trigram", "grams"):
            condition, cargs = _index_condition(parsed, mode)
            return self._newest(cur, [condition, *where], [*cargs, *args], limit)
        parts = [ParsedQuery(parsed.raw, (group,)) for group in parsed.groups]
        if len(parts) > 1 and all(part.mode != "scan" for part in parts):
            return self._union(cur, parts, query, limit)
        condition, cargs = _substring_condition(parsed, indexed=False)
        where, args = [condition, *where], [*cargs, *args]
        if query.session_id is not None:  # bounded by the session: no chunking needed
            return self._newest(cur, where, args, limit)
        return self._scan_rows(cur, where, args, limit)

    def _natural_rows(self, cur: Cursor, plan: NaturalPlan, where: list[str], args: list[Any],
                      query: SearchQuery, limit: int) -> list[tuple[Any, ...]]:
        """A sentence: every match scored in SQL (natural.py), best first, then loaded."""
        ranked = ranked_ids(cur, plan, where, args, limit, recency=query.sort == "recency")
        if not ranked:
            return []
        cur.execute(f"""SELECT {_HIT_COLS}, 0.0, NULL FROM messages m
                        JOIN sessions s ON s.id = m.session_id WHERE m.id = ANY(%s)""",
                    ([i for i, _ in ranked],))
        loaded = {int(r[0]): r for r in cur.fetchall()}
        return [(*loaded[i][:8], score, None) for i, score in ranked if i in loaded]

    def _newest(self, cur: Cursor, where: list[str], args: list[Any],
                limit: int) -> list[tuple[Any, ...]]:
        cur.execute(f"""SELECT {_HIT_COLS}, 0.0, NULL FROM messages m
                        JOIN sessions s ON s.id = m.session_id
                        WHERE {' AND '.join(where)} ORDER BY m.id DESC LIMIT %s""",
                    (*args, limit), prepare=False)
        return cur.fetchall()

    def _union(self, cur: Cursor, parts: list[ParsedQuery], query: SearchQuery,
               limit: int) -> list[tuple[Any, ...]]:
        """OR-groups mixing scripts: each group through its own index, merged newest first."""
        found: dict[int, tuple[Any, ...]] = {}
        for part in parts:
            for row in self._search_rows(cur, part, query, limit):
                found.setdefault(int(row[0]), row)
        return sorted(found.values(), key=lambda r: int(r[0]), reverse=True)[:limit]

    def _fts_rows(self, cur: Cursor, text: str, where: list[str], args: list[Any],
                  query: SearchQuery, limit: int) -> list[tuple[Any, ...]]:
        """Word matches; relevance ranks the newest ``RANK_CANDIDATES`` matches only, so a word
        found in half the archive costs a bounded sort, not a rank of every row."""
        clause = " AND ".join(["m.tsv @@ q", *where])
        matches = f"""FROM to_tsquery('refold_search', %s) q, messages m
                      JOIN sessions s ON s.id = m.session_id WHERE {clause}"""
        if query.sort == "recency":
            hits = f"""SELECT {_HIT_COLS}, ts_rank_cd(m.tsv, q) AS score, q {matches}
                       ORDER BY m.id DESC LIMIT %s"""
            params: list[Any] = [text, *args, limit]
            order = "id DESC"
        else:
            hits = f"""SELECT {_HIT_COLS}, ts_rank_cd(m.tsv, q) AS score, q
                       FROM (SELECT m.id {matches} ORDER BY m.id DESC LIMIT %s) c
                       JOIN messages m ON m.id = c.id JOIN sessions s ON s.id = m.session_id,
                       to_tsquery('refold_search', %s) q
                       ORDER BY score DESC, m.id DESC LIMIT %s"""
            params = [text, *args, RANK_CANDIDATES, text, limit]
            order = "score DESC, id DESC"
        # The headline is computed for the (few) returned rows only: it re-parses the text.
        cur.execute(f"""WITH hits AS ({hits})
                        SELECT id, session_id, seq, role, body, search_text, created_at, title,
                               score, ts_headline('refold_search', left(search_text, 100000), q,
                                   'StartSel=[, StopSel=], MaxWords=24, MinWords=8, '
                                   'MaxFragments=1, FragmentDelimiter=…')
                        FROM hits ORDER BY {order}""", params, prepare=False)
        return cur.fetchall()

    def _scan_rows(self, cur: Cursor, where: list[str], args: list[Any],
                   limit: int) -> list[tuple[Any, ...]]:
        """Newest first over growing id ranges, so a rare 1–2 character needle stays bounded.

        Small first ranges make a common needle cheap (the limit fills at once); ranges double
        up to ``SCAN_CHUNK`` so a rare one costs one pass over the table at most, within the
        row and time caps.
        """
        cur.execute("SELECT coalesce(max(id), 0) FROM messages")
        row = cur.fetchone()
        high = int(row[0]) if row else 0
        found: list[tuple[Any, ...]] = []
        visited, chunk, started = 0, SCAN_FIRST_CHUNK, time.monotonic()
        while high > 0 and len(found) < limit:
            low = max(0, high - chunk)
            cur.execute(f"""SELECT {_HIT_COLS}, 0.0, NULL FROM messages m
                            JOIN sessions s ON s.id = m.session_id
                            WHERE m.id > %s AND m.id <= %s AND {' AND '.join(where)}
                            ORDER BY m.id DESC LIMIT %s""",
                        (low, high, *args, limit - len(found)), prepare=False)
            found.extend(cur.fetchall())
            visited += high - low
            high, chunk = low, min(chunk * 2, SCAN_CHUNK)
            if visited >= SCAN_ROW_CAP or time.monotonic() - started > SCAN_TIME_CAP:
                log.info("CJK substring scan stopped at its cap (id %d)", high)
                break
        return found

    def _windows(self, cur: Cursor, rows: list[tuple[Any, ...]],
                 query: SearchQuery) -> list[list[StoredMessage]]:
        """Each hit's surrounding messages, all in one round trip (LATERAL per hit)."""
        if query.window <= 0 or not rows:
            return [[] for _ in rows]
        active = "" if query.include_inactive else " AND active"
        cols = ", ".join(f"x.{c}" for c in MESSAGE_COLS.split(", "))
        cur.execute(f"""SELECT h.ord, {cols}
                        FROM unnest(%s::text[], %s::int[]) WITH ORDINALITY AS h(sid, seq, ord),
                        LATERAL ((SELECT * FROM messages WHERE session_id = h.sid
                                    AND seq < h.seq{active} ORDER BY seq DESC LIMIT %s)
                                 UNION ALL
                                 (SELECT * FROM messages WHERE session_id = h.sid
                                    AND seq >= h.seq{active} ORDER BY seq LIMIT %s)) x""",
                    ([r[1] for r in rows], [r[2] for r in rows], query.window,
                     query.window + 1))
        grouped: dict[int, list[tuple[Any, ...]]] = {}
        for found in cur.fetchall():
            grouped.setdefault(int(found[0]) - 1, []).append(found[1:])
        out = []
        for index, row in enumerate(rows):
            items = sorted(grouped.get(index, []), key=lambda r: r[1])
            earlier = [r for r in items if r[1] < row[2]]
            rest = [r for r in items if r[1] >= row[2]]
            if rest and rest[0][1] != row[2]:  # the hit itself is hidden: ``window`` after
                rest = rest[:query.window]
            out.append([message_from_row(r) for r in earlier + rest])
        return out

    @staticmethod
    def _hit(row: tuple[Any, ...], parsed: ParsedQuery,
             window: list[StoredMessage]) -> SearchHit:
        message_id, session_id, seq, role, _body, text, created_at, title, score, headline = row
        snippet = headline if headline and "[" in headline else None
        return SearchHit(session_id=session_id, session_title=title, seq=seq, role=role,
                         snippet=snippet or make_snippet(text, parsed.highlight_needles()),
                         content=text, created_at=created_at, score=float(score),
                         window=window, message_id=int(message_id))


def _title_needles(parsed: ParsedQuery) -> list[str]:
    """What a session title must hold to rank first: every content term of the query."""
    if parsed.natural is not None:
        return parsed.natural.needles()
    return [n for t in parsed.terms if not t.negated for n in t.needles()]
