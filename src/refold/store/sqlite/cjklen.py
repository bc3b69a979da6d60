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

A process that searches CJK more than once keeps the table in NumPy arrays (``Lengths``):
reloaded when ``cjk_lengths_state.gen`` moves (a row changed or went), extended when rows
were added above the highest it holds; postings are then looked up there, not joined.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from typing import Any

from refold.store.sqlite.wordindex import per_file

TABLE = "cjk_lengths"
_WATERMARK = "(SELECT indexed_through FROM search_index_state WHERE id = 1)"

MIGRATION = (
    f"""CREATE TABLE {TABLE} (
        id INTEGER PRIMARY KEY, chars INTEGER NOT NULL, active INTEGER NOT NULL)""",
    f"INSERT INTO {TABLE} SELECT id, length(text), active FROM messages "
    f"WHERE has_cjk = 1 AND id <= {_WATERMARK}",
    # bumped whenever a row changes or goes (not when rows are added above the others):
    # a process's copy (``Lengths``) reloads then; it starts at random, so a database made
    # anew at the same path never matches an old copy
    f"""CREATE TABLE {TABLE}_state (id INTEGER PRIMARY KEY CHECK (id = 1),
        gen INTEGER NOT NULL)""",
    f"INSERT INTO {TABLE}_state VALUES (1, abs(random() % 1000000000))",
    f"""CREATE TRIGGER cjk_lengths_delete AFTER DELETE ON messages WHEN old.has_cjk = 1 BEGIN
        DELETE FROM {TABLE} WHERE id = old.id;
        UPDATE {TABLE}_state SET gen = gen + 1 WHERE id = 1;
    END""",
    f"""CREATE TRIGGER cjk_lengths_update AFTER UPDATE OF text, has_cjk, active ON messages
        WHEN old.has_cjk = 1 OR new.has_cjk = 1 BEGIN
        UPDATE {TABLE}_state SET gen = gen + 1 WHERE id = 1;
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
    conn.execute(f"UPDATE {TABLE}_state SET gen = gen + 1 WHERE id = 1")
    conn.execute(f"DELETE FROM {TABLE}")
    conn.execute(f"INSERT INTO {TABLE} SELECT id, length(text), active FROM messages "
                 f"WHERE has_cjk = 1 AND id <= {_WATERMARK}")


class Lengths:
    """A process's copy of ``cjk_lengths`` for one database file: sorted ids, their lengths
    and active flags (NumPy)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.key: tuple[int, int] | None = None  # (file, gen) it holds
        self.uses = 0
        self.ids: Any = None
        self.chars: Any = None
        self.active: Any = None

    def current(self, conn: sqlite3.Connection, path: str) -> Lengths | None:
        """Itself, brought up to date; None on the first use for a state (one search in a
        process joins in SQL rather than load the table: it imports no NumPy)."""
        try:
            key = (os.stat(path).st_ino, int(conn.execute(
                f"SELECT gen FROM {TABLE}_state WHERE id = 1").fetchone()[0]))
        except (OSError, TypeError):
            return None
        with self.lock:
            if self.key != key:
                self.uses += 1
                if self.uses < 2:
                    return None
                self.ids = self.chars = self.active = None
                self.key = key
            import numpy as np

            top = int(self.ids[-1]) if self.ids is not None and len(self.ids) else -1
            rows = conn.execute(f"SELECT id, chars, active FROM {TABLE} WHERE id > ? "
                                "ORDER BY id", (top,)).fetchall()
            if rows or self.ids is None:
                new = [np.fromiter((r[i] for r in rows), dtype=dt, count=len(rows))
                       for i, dt in ((0, np.int64), (1, np.float64), (2, np.bool_))]
                if self.ids is None:
                    self.ids, self.chars, self.active = new
                else:
                    self.ids = np.concatenate([self.ids, new[0]])
                    self.chars = np.concatenate([self.chars, new[1]])
                    self.active = np.concatenate([self.active, new[2]])
            return self

    def lookup(self, ids: Any, include_inactive: bool) -> tuple[Any, Any]:
        """(ids, lengths) of those of ``ids`` (ascending) the table holds, as the join with
        it (and ``active = 1`` unless ``include_inactive``) would give."""
        import numpy as np

        if not len(self.ids):
            return ids[:0], np.zeros(0)
        at = np.minimum(np.searchsorted(self.ids, ids), len(self.ids) - 1)
        keep = self.ids[at] == ids
        if not include_inactive:
            keep &= self.active[at]
        return ids[keep], self.chars[at[keep]]


_COPIES: dict[str, Lengths] = {}


def lengths_for(path: str) -> Lengths:
    return per_file(_COPIES, path, Lengths)
