"""Is a search index missing rows? A cheap check for a search that found nothing.

An FTS5 index can lose rows (a ``delete-all``, a restore of only the main table, a bug) and
then answers "no matches" for text that is stored: the worst failure for an archive whose
promise is that nothing is lost. Each index keeps one ``*_docsize`` row per indexed document,
so comparing those counts with the rows that should be indexed is a couple of ``count(*)``
reads, paid only when a search comes back empty.
"""

from __future__ import annotations

import sqlite3

from refold.errors import StorageError
from refold.store.sqlite import cjklen, grams
from refold.store.sqlite.indexer import WATERMARK

_INDEXED = f"id <= {WATERMARK}"  # the rows the indexes hold (indexer.py)
_EXPECTED = (
    ("messages_fts", f"SELECT count(*) FROM messages WHERE {_INDEXED}"),
    ("messages_trigram", f"SELECT count(*) FROM messages WHERE has_cjk = 1 AND {_INDEXED}"),
    (grams.TABLE, f"SELECT count(*) FROM messages WHERE has_cjk = 1 AND {_INDEXED}"),
)


def index_gaps(conn: sqlite3.Connection) -> list[str]:
    """One line per index whose document count differs from the rows it should hold."""
    gaps = []
    for table, expected_sql in (*_EXPECTED, (cjklen.TABLE, _EXPECTED[1][1])):
        counted = table if table == cjklen.TABLE else f"{table}_docsize"
        indexed = conn.execute(f"SELECT count(*) FROM {counted}").fetchone()[0]
        expected = conn.execute(expected_sql).fetchone()[0]
        if indexed != expected:
            gaps.append(f"{table} holds {indexed} of {expected} rows")
    return gaps


def require_intact_index(conn: sqlite3.Connection) -> None:
    """StorageError when an index is missing rows (so an empty answer would be a lie)."""
    gaps = index_gaps(conn)
    if gaps:
        raise StorageError("the search index is damaged (" + "; ".join(gaps) + "), so this "
                           "search cannot be trusted", hint="run `refold doctor --repair`")
