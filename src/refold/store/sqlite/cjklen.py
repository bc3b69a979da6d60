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

Packed blocks (migration 20, ``cjk_length_blocks``): the rows of each 2^``BLOCK_BITS`` ids in
one blob, read by the C module ``refold._cjklen`` for a question whose pieces have many
postings (a common character's ~9,000 at a million messages: the join and its tuples cost
~3.5 ms a piece, the blocks ~1). They are only a copy, and never a stale one:

- triggers on ``cjk_lengths`` delete the block of any row added, changed or deleted, and mark
  it in ``cjk_length_dirty``; so a block that exists is exact;
- ``seal_blocks`` packs dirty blocks whose ids all lie under the watermark (a few after each
  indexed batch, all of them in ``refold index`` and the sealing a search does);
- a reader takes the packed blocks and, for the dirty ones, the rows themselves.

Without the C module (or with ``REFOLD_NATIVE=0``) a process that searches CJK more than once
keeps the table in NumPy arrays (``Lengths``): reloaded when ``cjk_lengths_state.gen`` moves (a
row changed or went), extended when rows were added above the highest it holds; postings are
then looked up there, not joined.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import threading
from array import array
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from refold.store.sqlite.wordindex import per_file

_cjklen: ModuleType | None
try:
    from refold import _cjklen
except ImportError:  # built without a C compiler: the join, or NumPy
    _cjklen = None

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


BLOCKS, DIRTY = "cjk_length_blocks", "cjk_length_dirty"
BLOCK_BITS = 10  # ids a block: 1,024 (an offset fits two bytes)
MANY = 2000  # postings of a question's pieces from which the blocks beat the join
MOST_DIRTY = 8  # blocks not packed yet among those a question reads, at most (else: the join)
SEAL_AFTER_BATCH = 2  # blocks packed after each indexed batch (the rest: the sealing passes)
_INACTIVE = 1 << 31


def _marks(row: str) -> str:
    return (f"DELETE FROM {BLOCKS} WHERE block = {row}.id >> {BLOCK_BITS}; "
            f"INSERT OR IGNORE INTO {DIRTY} VALUES ({row}.id >> {BLOCK_BITS});")


BLOCKS_MIGRATION = (
    f"CREATE TABLE {BLOCKS} (block INTEGER PRIMARY KEY, data BLOB NOT NULL)",
    f"CREATE TABLE {DIRTY} (block INTEGER PRIMARY KEY)",
    f"CREATE TRIGGER {BLOCKS}_insert AFTER INSERT ON {TABLE} BEGIN {_marks('new')} END",
    f"CREATE TRIGGER {BLOCKS}_delete AFTER DELETE ON {TABLE} BEGIN {_marks('old')} END",
    f"CREATE TRIGGER {BLOCKS}_update AFTER UPDATE ON {TABLE} BEGIN {_marks('old')} "
    f"{_marks('new')} END",
    f"INSERT INTO {DIRTY} SELECT DISTINCT id >> {BLOCK_BITS} FROM {TABLE}",
)


def _pack(rows: Sequence[tuple[int, int, int]]) -> bytes:
    """A block's rows (ascending ids) as ``_cjklen.c`` reads them: the offsets, then the
    lengths with the top bit set for an inactive row (a length is under SQLite's 10^9-byte
    limit on a value: 31 bits hold it)."""
    offsets = array("H", [int(r[0]) & ((1 << BLOCK_BITS) - 1) for r in rows])
    values = array("I", [int(r[1]) | (0 if r[2] else _INACTIVE) for r in rows])  # 4 bytes
    if sys.byteorder == "big":
        offsets.byteswap()
        values.byteswap()
    return offsets.tobytes() + values.tobytes()


def _block_rows(conn: sqlite3.Connection, block: int) -> list[tuple[int, int, int]]:
    """(id, chars, active) of the rows of ``block``, by id."""
    return conn.execute(f"SELECT id, chars, active FROM {TABLE} WHERE id >= ? AND id < ? "
                        "ORDER BY id", (block << BLOCK_BITS, (block + 1) << BLOCK_BITS)
                        ).fetchall()


def seal_blocks(conn: sqlite3.Connection, most: int | None = None) -> int:
    """Pack up to ``most`` (None: every) dirty block whose ids all lie under the watermark;
    returns how many. Call in a write transaction."""
    through = int(conn.execute(f"SELECT {_WATERMARK}").fetchone()[0])
    todo = [int(r[0]) for r in conn.execute(
        f"SELECT block FROM {DIRTY} WHERE block < ? ORDER BY block LIMIT ?",
        ((through + 1) >> BLOCK_BITS, -1 if most is None else most))]
    for block in todo:
        rows = _block_rows(conn, block)
        if rows:
            conn.execute(f"INSERT OR REPLACE INTO {BLOCKS} VALUES (?, ?)", (block, _pack(rows)))
        conn.execute(f"DELETE FROM {DIRTY} WHERE block = ?", (block,))
    return len(todo)


def _unpack(block: int, data: bytes) -> list[tuple[int, int, int]]:
    count = len(data) // 6
    offsets, values = array("H"), array("I")
    offsets.frombytes(data[:2 * count])
    values.frombytes(data[2 * count:6 * count])
    if sys.byteorder == "big":
        offsets.byteswap()
        values.byteswap()
    return [((block << BLOCK_BITS) | o, v & (_INACTIVE - 1), 0 if v & _INACTIVE else 1)
            for o, v in zip(offsets, values, strict=True)]


def block_problems(conn: sqlite3.Connection) -> list[str]:
    """Packed blocks that differ from the rows they copy, and blocks of rows neither packed
    nor marked to be (``refold doctor``; ``rebuild`` repairs both)."""
    wrong = [int(block) for block, data in conn.execute(f"SELECT block, data FROM {BLOCKS}")
             if len(data) % 6 or _unpack(int(block), bytes(data)) != _block_rows(conn, block)]
    lost = [int(r[0]) for r in conn.execute(
        f"SELECT DISTINCT id >> {BLOCK_BITS} FROM {TABLE} EXCEPT SELECT block FROM {BLOCKS} "
        f"EXCEPT SELECT block FROM {DIRTY}")]
    out = []
    for blocks, what in ((wrong, "differ from the rows they copy"),
                         (lost, "neither packed nor marked")):
        if blocks:
            out.append(f"{BLOCKS}: {len(blocks)} block(s) {what} (first: {blocks[:5]})")
    return out


def blocks_usable() -> bool:
    """Is the C reader of the blocks built, and not turned off (``REFOLD_NATIVE=0``)?"""
    return _cjklen is not None and os.environ.get("REFOLD_NATIVE", "1") != "0"


def weighed_postings(conn: sqlite3.Connection, pieces: Sequence[tuple[str, str]],
                     include_inactive: bool) -> list[list[tuple[int, int]]] | None:
    """The (id, chars) rows of each (index, match) piece's postings, as the join with
    ``cjk_lengths`` gives them (``active = 1`` unless ``include_inactive``), from the packed
    blocks and the dirty blocks' rows; None: no C reader, or postings too few to be worth it
    (the join answers)."""
    if not blocks_usable() or not pieces:
        return None
    assert _cjklen is not None
    texts = [conn.execute(f"SELECT group_concat(rowid) FROM {table} WHERE {table} MATCH ?",
                          (match,)).fetchone()[0] for table, match in pieces]
    spans = [_cjklen.span(text) for text in texts]
    if sum(s[0] for s in spans) <= MANY:
        return None
    low = min(s[1] for s in spans if s[0]) >> BLOCK_BITS
    high = max(s[2] for s in spans if s[0]) >> BLOCK_BITS
    dirty = [int(r[0]) for r in conn.execute(
        f"SELECT block FROM {DIRTY} WHERE block BETWEEN ? AND ? ORDER BY block LIMIT ?",
        (low, high, MOST_DIRTY + 1))]
    if len(dirty) > MOST_DIRTY:  # not packed yet (an import): the join reads no more rows
        return None
    blocks = conn.execute(f"SELECT block, data FROM {BLOCKS} WHERE block BETWEEN ? AND ? "
                          "ORDER BY block", (low, high)).fetchall()
    extra: list[tuple[int, int, int]] = []
    for block in dirty:
        extra += _block_rows(conn, block)
    return [_cjklen.rows(text, blocks, extra, BLOCK_BITS, include_inactive) for text in texts]


def index_rows(conn: sqlite3.Connection, low: int, high: int) -> None:
    """Add the CJK rows with ids in (low, high] (being indexed now)."""
    conn.execute(f"INSERT OR REPLACE INTO {TABLE} SELECT id, length(text), active FROM messages "
                 "WHERE id > ? AND id <= ? AND has_cjk = 1", (low, high))


def rebuild(conn: sqlite3.Connection) -> None:
    """Refill the table from the messages under the watermark, and its blocks (``refold
    doctor --repair``)."""
    conn.execute(f"UPDATE {TABLE}_state SET gen = gen + 1 WHERE id = 1")
    conn.execute(f"DELETE FROM {TABLE}")
    conn.execute(f"INSERT INTO {TABLE} SELECT id, length(text), active FROM messages "
                 f"WHERE has_cjk = 1 AND id <= {_WATERMARK}")
    conn.execute(f"DELETE FROM {BLOCKS}")  # (the triggers marked the blocks of every row)
    seal_blocks(conn)


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
