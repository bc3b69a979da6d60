"""Search on PostgreSQL: tsvector for Latin text, pg_trgm for CJK, a bounded scan for 1–2 chars.

The query is sanitized by ``refold.search.query.parse_query`` (shared with SQLite); this module
only turns its plan into SQL, always with bound parameters, so no user input is ever SQL or
tsquery syntax:

- ``fts``: a tsquery built from the sanitized words (each word a quoted lexeme; phrases with
  ``<->``; ``word*`` as ``:*``), matched against the generated ``tsv`` column (GIN index),
  ranked by ``ts_rank_cd``. The text search configuration ``refold_search`` (created by the
  migrations) uses the original Porter stemmer and keeps stop words, like SQLite's FTS5
  ``porter unicode61``; a query left without lexemes falls back to the substring path.
- ``trigram``: ``ILIKE '%needle%'`` on ``search_text``, which the ``gin_trgm_ops`` index answers
  for needles of 3+ characters; shorter needles and exclusions are checked on those rows.
- ``scan``: needles all shorter than 3 characters (or OR-groups with CJK): the same ILIKE
  conditions over id ranges, newest first, stopping at the limit or ``SCAN_ROW_CAP`` rows, so
  every message containing a 1–2 character CJK query is found within the cap.
"""

from __future__ import annotations

import time
from typing import Any

from refold.search.query import ParsedQuery, Term, make_snippet, parse_query
from refold.store.base import SearchHit, SearchQuery
from refold.store.postgres.core import Cursor
from refold.store.postgres.ledger import LedgerMixin
from refold.store.titles import like_escape

SCAN_CHUNK = 50_000  # ids per scan step
SCAN_ROW_CAP = 5_000_000  # ids a scan visits at most
SCAN_TIME_CAP = 5.0  # seconds a scan runs at most
MAX_LIMIT = 500

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


def _substring_condition(parsed: ParsedQuery) -> tuple[str, list[Any]]:
    ors, args = [], []
    for must, must_not in parsed.substring_groups():
        parts = []
        for needle in must:
            parts.append("m.search_text ILIKE %s")
            args.append("%" + like_escape(needle) + "%")
        for needle in must_not:
            parts.append("m.search_text NOT ILIKE %s")
            args.append("%" + like_escape(needle) + "%")
        ors.append("(" + " AND ".join(parts) + ")")
    return "(" + " OR ".join(ors) + ")", args


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
    """Search; builds on the ledger for the window of messages around each hit."""

    def search(self, query: SearchQuery) -> list[SearchHit]:
        parsed = parse_query(query.text)
        if parsed.is_empty:
            return []
        limit = max(1, min(int(query.limit), MAX_LIMIT))
        with self._tx("search") as cur:
            rows = self._search_rows(cur, parsed, query, limit)
            return [self._hit(cur, row, parsed, query) for row in rows]

    def _search_rows(self, cur: Cursor, parsed: ParsedQuery, query: SearchQuery,
                     limit: int) -> list[tuple[Any, ...]]:
        where, args = _filters(query)
        if parsed.mode == "fts":
            text = tsquery_text(parsed)
            cur.execute("SELECT numnode(to_tsquery('refold_search', %s))", (text,))
            row = cur.fetchone()
            if row and row[0] > 0:
                return self._fts_rows(cur, text, where, args, query, limit)
        condition, cargs = _substring_condition(parsed)
        where, args = [condition, *where], [*cargs, *args]
        if parsed.mode == "trigram":
            order = "m.id DESC"
            cur.execute(f"""SELECT {_HIT_COLS}, 0.0, NULL FROM messages m
                            JOIN sessions s ON s.id = m.session_id
                            WHERE {' AND '.join(where)} ORDER BY {order} LIMIT %s""",
                        (*args, limit))
            return cur.fetchall()
        if query.session_id is not None:  # bounded by the session: no chunking needed
            cur.execute(f"""SELECT {_HIT_COLS}, 0.0, NULL FROM messages m
                            JOIN sessions s ON s.id = m.session_id
                            WHERE {' AND '.join(where)} ORDER BY m.id DESC LIMIT %s""",
                        (*args, limit))
            return cur.fetchall()
        return self._scan_rows(cur, where, args, limit)

    def _fts_rows(self, cur: Cursor, text: str, where: list[str], args: list[Any],
                  query: SearchQuery, limit: int) -> list[tuple[Any, ...]]:
        order = "m.id DESC" if query.sort == "recency" else "score DESC, m.id DESC"
        clause = " AND ".join(["m.tsv @@ q", *where])
        # The headline is computed for the (few) returned rows only: it re-parses the text.
        cur.execute(f"""WITH hits AS (
                            SELECT {_HIT_COLS}, ts_rank_cd(m.tsv, q) AS score, q
                            FROM to_tsquery('refold_search', %s) q, messages m
                            JOIN sessions s ON s.id = m.session_id
                            WHERE {clause} ORDER BY {order} LIMIT %s)
                        SELECT id, session_id, seq, role, body, search_text, created_at, title,
                               score, ts_headline('refold_search', left(search_text, 100000), q,
                                   'StartSel=[, StopSel=], MaxWords=24, MinWords=8, '
                                   'MaxFragments=1, FragmentDelimiter=…')
                        FROM hits ORDER BY {order.replace("m.", "")}""", (text, *args, limit))
        return cur.fetchall()

    def _scan_rows(self, cur: Cursor, where: list[str], args: list[Any],
                   limit: int) -> list[tuple[Any, ...]]:
        """Newest first over id ranges, so a rare 1–2 character needle stays bounded."""
        cur.execute("SELECT coalesce(max(id), 0) FROM messages")
        row = cur.fetchone()
        high = int(row[0]) if row else 0
        found: list[tuple[Any, ...]] = []
        visited, started = 0, time.monotonic()
        while high > 0 and len(found) < limit:
            low = max(0, high - SCAN_CHUNK)
            cur.execute(f"""SELECT {_HIT_COLS}, 0.0, NULL FROM messages m
                            JOIN sessions s ON s.id = m.session_id
                            WHERE m.id > %s AND m.id <= %s AND {' AND '.join(where)}
                            ORDER BY m.id DESC LIMIT %s""",
                        (low, high, *args, limit - len(found)))
            found.extend(cur.fetchall())
            visited += high - low
            high = low
            if visited >= SCAN_ROW_CAP or time.monotonic() - started > SCAN_TIME_CAP:
                break
        return found

    def _hit(self, cur: Cursor, row: tuple[Any, ...], parsed: ParsedQuery,
             query: SearchQuery) -> SearchHit:
        _, session_id, seq, role, _body, text, created_at, title, score, headline = row
        snippet = headline if headline and "[" in headline else None
        window = []
        if query.window > 0:
            window = self._around(cur, session_id, seq, query.window, query.window,
                                  query.include_inactive)
        return SearchHit(session_id=session_id, session_title=title, seq=seq, role=role,
                         snippet=snippet or make_snippet(text, parsed.highlight_needles()),
                         content=text, created_at=created_at, score=float(score),
                         window=window)
