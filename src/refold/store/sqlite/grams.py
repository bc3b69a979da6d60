"""Keeping the CJK gram index (``messages_cjk_grams``) in step with the messages table.

The index is a contentless FTS5 table (unicode61, detail=none) whose document for a message is
``refold.search.query.cjk_grams(text)``: its CJK letters and adjacent letter pairs. It answers
1–2 letter CJK queries exactly, which a trigram index cannot. The grams are computed in Python,
so rows are indexed and un-indexed here, inside the caller's write transaction, rather than by
SQL triggers (which would need a Python function registered on every connection that writes).

Invariant: every message row with ``has_cjk = 1`` written by refold is in the index while it
exists; search re-checks candidates with ``instr`` so a stale entry (a row deleted by another
tool) can never produce a wrong hit.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from refold.search.query import cjk_grams

TABLE = "messages_cjk_grams"
CREATE = (f"CREATE VIRTUAL TABLE {TABLE} USING fts5(grams, content='', detail='none', "
          "tokenize='unicode61 remove_diacritics 0')")


def _documents(rows: Iterable[tuple[int, str]]) -> list[tuple[int, str]]:
    return [(rowid, grams) for rowid, text in rows if (grams := cjk_grams(text))]


def index_rows(conn: sqlite3.Connection, rows: Iterable[tuple[int, str]]) -> None:
    """Add (message id, text) rows to the gram index."""
    conn.executemany(f"INSERT INTO {TABLE}(rowid, grams) VALUES (?, ?)", _documents(rows))


def index_session_range(conn: sqlite3.Connection, session_id: str, first_seq: int,
                        last_seq: int) -> None:
    """Index the CJK rows a call just inserted (seq first_seq..last_seq)."""
    rows = conn.execute("SELECT id, text FROM messages WHERE session_id = ? AND seq >= ? "
                        "AND seq <= ? AND has_cjk = 1", (session_id, first_seq, last_seq))
    index_rows(conn, rows.fetchall())


def unindex_session(conn: sqlite3.Connection, session_id: str) -> None:
    """Remove a session's indexed rows (at or under the watermark, ``indexer.py``) from the
    gram index, before the rows themselves go."""
    rows = conn.execute("SELECT id, text FROM messages WHERE session_id = ? AND has_cjk = 1 "
                        "AND id <= (SELECT indexed_through FROM search_index_state)",
                        (session_id,)).fetchall()
    conn.executemany(f"INSERT INTO {TABLE}({TABLE}, rowid, grams) VALUES ('delete', ?, ?)",
                     _documents(rows))


def backfill(conn: sqlite3.Connection) -> None:
    """Index every existing CJK row (the migration that creates the table runs this)."""
    cursor = conn.execute("SELECT id, text FROM messages WHERE has_cjk = 1 ORDER BY id")
    while batch := cursor.fetchmany(5000):
        index_rows(conn, batch)
