"""Which words CJK messages hold glued to their text: a small table that rules most out.

A question's plain words are also looked for where a CJK message holds them glued to its
text (``用pytest跑``; ``refold.search.natural.glued_words``): a trigram lookup of each word (and
its full-width forms) over every segment of ``messages_trigram``, then GLOB on the rows found.
On a cold cache that lookup alone read ~35 pages for an English question that no CJK message
holds glued at all. ``glued_words`` lists every word (``natural.glued_in``, ASCII lower case,
up to ``MAX_GLUED_CHARS``) that some indexed CJK message holds glued: a word not listed is
glued nowhere, and the search skips its lookup (one read of this small table instead).

The list may hold more than is true (a message deleted leaves its words; harmless: the lookup
then runs as before), never less: every CJK row ``indexer.index_pending`` indexes adds its
words in the same transaction, and a CJK row rewritten in place (no refold path does it) marks
the list stale (the row ``''``, by trigger): a stale list rules nothing out until ``refold
index`` or ``refold doctor --repair`` rebuilds it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from refold.search.natural import MAX_GLUED_CHARS, glued_in

TABLE = "glued_words"
STALE = ""  # the row that marks the list stale

MIGRATION = (
    f"CREATE TABLE {TABLE} (word TEXT PRIMARY KEY) WITHOUT ROWID",
    f"""CREATE TRIGGER glued_words_stale AFTER UPDATE OF text, has_cjk ON messages
        WHEN new.has_cjk = 1 AND old.id <= (SELECT indexed_through FROM search_index_state
                                              WHERE id = 1) BEGIN
        INSERT OR IGNORE INTO {TABLE} (word) VALUES ('{STALE}');
    END""",
)


def index_rows(conn: sqlite3.Connection, rows: Iterable[tuple[int, str]]) -> None:
    """Add the glued words of (id, text) CJK rows being indexed."""
    words = {w for _, text in rows for w in glued_in(text or "", None)}
    if words:
        conn.executemany(f"INSERT OR IGNORE INTO {TABLE} (word) VALUES (?)",
                         ((w,) for w in words))


def backfill(conn: sqlite3.Connection) -> None:
    """Fill the list from every CJK message (the migration, ``rebuild``)."""
    cursor = conn.execute("SELECT id, text FROM messages WHERE has_cjk = 1 ORDER BY id")
    while True:
        batch = cursor.fetchmany(5000)
        if not batch:
            return
        index_rows(conn, batch)


def rebuild(conn: sqlite3.Connection) -> None:
    conn.execute(f"DELETE FROM {TABLE}")
    backfill(conn)


def is_stale(conn: sqlite3.Connection) -> bool:
    return conn.execute(f"SELECT 1 FROM {TABLE} WHERE word = ?", (STALE,)).fetchone() is not None


def ruled_out(conn: sqlite3.Connection, words: Iterable[str]) -> set[str]:
    """The ``words`` that no indexed CJK message holds glued (none when the list is stale)."""
    asked = {w.lower() for w in words if len(w) <= MAX_GLUED_CHARS}
    if not asked:
        return set()
    marks = ",".join("?" * (len(asked) + 1))
    found = {str(r[0]) for r in conn.execute(
        f"SELECT word FROM {TABLE} WHERE word IN ({marks})", [STALE, *asked])}
    return set() if STALE in found else asked - found
