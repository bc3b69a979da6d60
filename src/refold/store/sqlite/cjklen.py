"""The characters and active flag of every indexed CJK message, in a narrow table.

A natural-language CJK query weighs each posting of its terms by the message's length
(``rank.presence_weight``) and keeps active rows only. Reading ``length(text)`` and ``active``
from ``messages`` costs a walk through the row's overflow pages (the stored JSON comes first),
for every posting: a common bigram at a million messages took ~50 ms. ``cjk_lengths`` holds
them for the CJK rows under the search watermark (migration 10):

- ``indexer.index_pending`` adds the rows it indexes (one statement, inside its transaction);
- triggers keep it in step when a row is deleted, rewritten or rewound (``active``);
- so it holds exactly the rows with ``has_cjk = 1`` and ``id <= indexed_through``, with their
  current ``length(text)`` and ``active``: the postings of the CJK indexes join it instead.
"""

from __future__ import annotations

import sqlite3

TABLE = "cjk_lengths"
_WATERMARK = "(SELECT indexed_through FROM search_index_state WHERE id = 1)"

MIGRATION = (
    f"""CREATE TABLE {TABLE} (
        id INTEGER PRIMARY KEY, chars INTEGER NOT NULL, active INTEGER NOT NULL)""",
    f"INSERT INTO {TABLE} SELECT id, length(text), active FROM messages "
    f"WHERE has_cjk = 1 AND id <= {_WATERMARK}",
    f"""CREATE TRIGGER cjk_lengths_delete AFTER DELETE ON messages WHEN old.has_cjk = 1 BEGIN
        DELETE FROM {TABLE} WHERE id = old.id;
    END""",
    f"""CREATE TRIGGER cjk_lengths_update AFTER UPDATE OF text, has_cjk, active ON messages
        WHEN old.has_cjk = 1 OR new.has_cjk = 1 BEGIN
        DELETE FROM {TABLE} WHERE id = old.id;
        INSERT INTO {TABLE} SELECT new.id, length(new.text), new.active
            WHERE new.has_cjk = 1 AND new.id <= {_WATERMARK};
    END""",
)


def index_rows(conn: sqlite3.Connection, low: int, high: int) -> None:
    """Add the CJK rows with ids in (low, high] (being indexed now)."""
    conn.execute(f"INSERT OR REPLACE INTO {TABLE} SELECT id, length(text), active FROM messages "
                 "WHERE id > ? AND id <= ? AND has_cjk = 1", (low, high))


def rebuild(conn: sqlite3.Connection) -> None:
    """Refill the table from the messages under the watermark (``refold doctor --repair``)."""
    conn.execute(f"DELETE FROM {TABLE}")
    conn.execute(f"INSERT INTO {TABLE} SELECT id, length(text), active FROM messages "
                 f"WHERE has_cjk = 1 AND id <= {_WATERMARK}")
