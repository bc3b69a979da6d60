"""A CJK question's postings: which index finds a piece, whether a filter narrows the
question, and (on a cold cache) the length pages its postings join, asked of the OS first.
``natural.py`` reads and weighs them."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from refold.search.natural import SHORT_SPAN_EDGE, short_span
from refold.search.query import is_gram_needle
from refold.store.base import SearchQuery
from refold.store.sqlite import cjklen, readahead


def cjk_index(piece: str) -> tuple[str, str, str, list[object]]:
    """How to find the messages holding a CJK term: the index (gram or trigram), its MATCH
    string, and a test of ``m.text`` with its arguments ("" when the index alone is exact).
    A ``short_span`` (``6号``, ``2일``) is looked up by its CJK letter's gram, then its text
    holds the span with no letter or digit before it (``16号`` holds no ``6号``)."""
    if short_span(piece):  # (instr first: the class of GLOB's edge is 3x slower alone)
        span = piece.lower()
        glob = f"*[^{SHORT_SPAN_EDGE}]{span}*"  # (the text padded: its start is an edge)
        return ("messages_cjk_grams", '"' + piece[1] + '"',
                " AND instr(lower(m.text), ?) AND (' ' || lower(m.text)) GLOB ?", [span, glob])
    table = "messages_cjk_grams" if is_gram_needle(piece) else "messages_trigram"
    return table, '"' + piece + '"', "", []


def where_narrows(query: SearchQuery) -> bool:
    """True when a filter other than "active rows only" applies."""
    return any(v is not None for v in (
        query.session_id, query.exclude_session_id, query.role, query.source, query.owner,
        query.since, query.until))


LENGTHS_GAP = 1024  # ids between two postings whose lengths are asked for as one span
LENGTHS_WHOLE = 400  # pages of cjk_lengths (1.6 MB, ~150k CJK messages) asked for whole...
LENGTHS_FEW = cjklen.MANY  # ... unless the pieces' postings are this few: the pages they name


def ask_lengths(conn: sqlite3.Connection, pieces: Sequence[str], query: SearchQuery) -> None:
    """On a cold cache: the ``cjk_lengths`` pages the pieces' postings join, asked of the OS
    at once (``readahead.py``) before ``_postings`` reads them one lookup at a time. The
    pages the postings name when they are few (a question of rare pieces: a few dozen pages,
    not the table's hundreds, each one more random read); else, a common character's
    postings touching most of it, the packed blocks they are then weighed from
    (``cjklen.weighed_postings``, with the C reader), or without it the whole table while it
    is small (its postings not read twice), or again the pages they name."""
    if not readahead.cold() or where_narrows(query):
        return
    ids: set[int] = set()
    for piece in pieces:  # (the doclists read here are the join's: cached for it)
        table, match, _, _ = cjk_index(piece)
        ids.update(int(r[0]) for r in conn.execute(
            f"SELECT rowid FROM {table} WHERE {table} MATCH ? LIMIT ?",
            (match, LENGTHS_FEW + 1 - len(ids))))
        if len(ids) > LENGTHS_FEW:
            break
    if len(ids) > LENGTHS_FEW:
        if cjklen.blocks_usable():  # (read from the packed blocks: ``piece_rows``)
            readahead.ask(conn, [readahead.Want(cjklen.BLOCKS, most=LENGTHS_WHOLE)])
            return
        if cjklen.TABLE in readahead.ask(conn, [readahead.Want(cjklen.TABLE,
                                                               most=LENGTHS_WHOLE)]):
            return  # a small table: all of it, in one go
        for piece in pieces:
            table, match, _, _ = cjk_index(piece)
            ids.update(int(r[0]) for r in conn.execute(
                f"SELECT rowid FROM {table} WHERE {table} MATCH ?", (match,)))
    spans: list[tuple[int, int]] = []
    for i in sorted(ids):  # nearby postings as one span: fewer routes, the same pages
        if spans and i - spans[-1][1] <= LENGTHS_GAP:
            spans[-1] = (spans[-1][0], i)
        else:
            spans.append((i, i))
    readahead.table_rows(conn, cjklen.TABLE, spans)
