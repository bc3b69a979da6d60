"""Search indexing off the commit path: a watermark, a batch indexer, and search catching up.

A durable append used to index its row in the word, trigram and CJK gram indexes inside its own
commit: three FTS5 segment flushes per one-row transaction, about as much work again as the row
itself. Now (migration 7) an append only stores the row; ``search_index_state.indexed_through``
(the watermark) says which rows the three indexes hold:

- every message with ``id <= indexed_through`` is in every index it belongs in (``messages_fts``
  all rows; ``messages_trigram`` and the gram index the CJK rows), and no row above it is in any;
- ``index_pending`` indexes the rows above the watermark, oldest first, in one statement per
  index, and moves the watermark, inside the caller's write transaction;
- writers call it when a call stores ``INLINE_ROWS`` rows or more (bulk work: indexing in the
  same commit is already amortised) or when the unindexed tail reaches ``TAIL_ROWS`` (so one
  append in ``TAIL_ROWS`` indexes the batch, in its own commit: one FTS5 segment per index for
  the whole batch instead of one per row);
- a search first brings the index up to date (``catch_up``: a no-op read when nothing is
  pending), so it finds every message stored, ranked with statistics over all of them;
- deleting or rewriting a row touches the indexes only when the row is at or under the
  watermark (an FTS5 ``delete`` of a row that was never indexed would corrupt the index), and
  the watermark never exceeds the highest id, so an id reused after a delete is indexed anew.
"""

from __future__ import annotations

import sqlite3

from refold.store.sqlite import cjklen, glued, grams, wordseal

INLINE_ROWS = 16  # a call storing at least this many rows (an import) indexes them in its commit
TAIL_ROWS = 256  # the unindexed tail is indexed once it is this long
STATE = "search_index_state"
WATERMARK = f"(SELECT indexed_through FROM {STATE} WHERE id = 1)"

MIGRATION = (
    f"""CREATE TABLE {STATE} (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        indexed_through INTEGER NOT NULL)""",
    # every row stored so far was indexed by the insert trigger this migration drops
    f"INSERT INTO {STATE} (id, indexed_through) "
    "SELECT 1, coalesce(max(id), 0) FROM messages",
    "DROP TRIGGER messages_fts_insert",
    "DROP TRIGGER messages_fts_delete",
    "DROP TRIGGER messages_fts_update",
    # One trigger, in this order: un-index the row if it is indexed, then keep the watermark
    # at or under the highest id (or a new row reusing a deleted id would count as indexed).
    f"""CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
        INSERT INTO messages_fts(messages_fts, rowid, text)
            SELECT 'delete', old.id, old.text WHERE old.id <= {WATERMARK};
        INSERT INTO messages_trigram(messages_trigram, rowid, text)
            SELECT 'delete', old.id, old.text WHERE old.has_cjk = 1 AND old.id <= {WATERMARK};
        UPDATE {STATE} SET indexed_through = (SELECT coalesce(max(id), 0) FROM messages)
            WHERE id = 1 AND indexed_through > (SELECT coalesce(max(id), 0) FROM messages);
    END""",
    f"""CREATE TRIGGER messages_fts_update AFTER UPDATE OF text, has_cjk ON messages
        WHEN old.id <= {WATERMARK} BEGIN
        INSERT INTO messages_fts(messages_fts, rowid, text) VALUES ('delete', old.id, old.text);
        INSERT INTO messages_trigram(messages_trigram, rowid, text)
            SELECT 'delete', old.id, old.text WHERE old.has_cjk = 1;
        INSERT INTO messages_fts(rowid, text) VALUES (new.id, new.text);
        INSERT INTO messages_trigram(rowid, text) SELECT new.id, new.text WHERE new.has_cjk = 1;
    END""",
)


def watermark(conn: sqlite3.Connection) -> int:
    return int(conn.execute(f"SELECT indexed_through FROM {STATE} WHERE id = 1").fetchone()[0])


def pending(conn: sqlite3.Connection) -> int:
    """How many ids lie above the watermark (an upper bound on the unindexed rows)."""
    row = conn.execute(f"SELECT coalesce(max(id), 0) - {WATERMARK} FROM messages").fetchone()
    return int(row[0])


def index_pending(conn: sqlite3.Connection) -> int:
    """Index every row above the watermark and move it to the highest id; returns how many ids
    that covered. Then fold word-index changes in (``wordseal.fold_changes``). Call inside a
    write transaction.

    Nothing here seals a word-index chunk (~0.5 s at a million messages: off the write path);
    a search on a large archive seals one (``catch_up_index``), ``refold index`` all. The rows
    above them are sealed here as a recent block once there are ``wordindex.RECENT_ROWS``
    (``wordseal.seal_recent``: the rows just indexed, tokenized while warm)."""
    low = watermark(conn)
    high = int(conn.execute("SELECT coalesce(max(id), 0) FROM messages").fetchone()[0])
    if high <= low:
        wordseal.fold_changes(conn, low)
        return 0
    span = (low, high)
    conn.execute("INSERT INTO messages_fts(rowid, text) SELECT id, text FROM messages "
                 "WHERE id > ? AND id <= ?", span)
    conn.execute("INSERT INTO messages_trigram(rowid, text) SELECT id, text FROM messages "
                 "WHERE id > ? AND id <= ? AND has_cjk = 1", span)
    cjk = conn.execute("SELECT id, text FROM messages WHERE id > ? AND id <= ? AND has_cjk = 1",
                       span).fetchall()
    grams.index_rows(conn, cjk)
    glued.index_rows(conn, cjk)
    cjklen.index_rows(conn, low, high)
    conn.execute(f"UPDATE {STATE} SET indexed_through = ? WHERE id = 1", (high,))
    cjklen.seal_blocks(conn, cjklen.SEAL_AFTER_BATCH)  # (the blocks this batch completed)
    wordseal.fold_changes(conn, high)
    wordseal.seal_recent(conn)
    return high - low


# The FTS5 indexes a search probes, and how many leaf pages one merge step writes in each.
FTS_TABLES = ("messages_fts", "messages_trigram", "messages_cjk_grams")
MERGE_PAGES = 500


def merge_segments(conn: sqlite3.Connection, table: str, pages: int = MERGE_PAGES) -> bool:
    """One step of merging ``table``'s FTS5 segments (about ``pages`` leaf pages written):
    any level holding two or more segments is merged into one of the next level. Call in a
    write transaction; True when the step did work (more may be left).

    A query probes every segment once a term, two pages or so on a cold cache. Batches of
    ``TAIL_ROWS`` rows each flush a segment and FTS5's automerge joins them four at a time,
    leaving up to three a level: a million messages held 9 to 13 segments an index, and a
    cold CJK question read ~40 more pages than with one. Merged two at a time (FTS5's
    ``usermerge`` 2, used by the ``merge`` command only: the write path's automerge stays at
    four), an index keeps at most one segment a level."""
    conn.execute(f"INSERT INTO {table}({table}, rank) VALUES ('usermerge', 2)")
    before = conn.total_changes
    conn.execute(f"INSERT INTO {table}({table}, rank) VALUES ('merge', ?)", (pages,))
    return conn.total_changes - before >= 2  # (FTS5's own test of "work was done")


def after_insert(conn: sqlite3.Connection, rows: int, top: int | None = None,
                 indexed_through: int | None = None) -> None:
    """What a writer calls after storing ``rows`` rows (inside its transaction); ``top`` (the
    highest id now) and ``indexed_through`` (the watermark) when the caller knows them."""
    if rows >= INLINE_ROWS:
        index_pending(conn)
        return
    if top is None:
        behind = pending(conn)
    else:
        behind = top - (watermark(conn) if indexed_through is None else indexed_through)
    if behind >= TAIL_ROWS:
        index_pending(conn)
