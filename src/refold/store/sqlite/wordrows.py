"""Where the word index's sealed postings rows live (migration 18): one row per (term, chunk)
in a rowid table keyed by the term's number and the chunk, the terms numbered in a small
table of their own.

Before, the rows were a ``WITHOUT ROWID`` table keyed by (term, chunk). Such a table is an
index b-tree, whose cells hold the whole row, blobs included: a common word's row is ~9 KB,
so its interior pages held a few cells each and every seek compared the sought term with
cells whose payload overflows, reading each such cell's overflow chain in full. A cold search
of three words read ~95 pages of postings for ~40 pages of data (the reads counted with
``strace``, the pages mapped to their b-trees with ``dbstat``). Here a term's key is a small
row of ``word_terms`` (its number), and its postings rows are ``word_blobs`` rows whose rowid
is the number shifted left ``CHUNK_BITS`` plus the chunk: an interior cell is a rowid, and one
term's rows sit side by side, read by one range scan. The blobs' format is unchanged
(``wordindex``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

TERMS_INDEX = "sqlite_autoindex_word_terms_1"  # word_terms(term UNIQUE): a term's number
CHUNK_BITS = 24  # a row's key: term number << CHUNK_BITS | chunk (16M chunks: 68G messages)
CHUNK_MASK = (1 << CHUNK_BITS) - 1

Row = tuple[str, int, bytes, bytes, bytes]  # (term, chunk, ids, tfs, lens)

MIGRATION = (
    "CREATE TABLE word_terms (tid INTEGER PRIMARY KEY, term TEXT NOT NULL UNIQUE)",
    "CREATE TABLE word_blobs (id INTEGER PRIMARY KEY, ids BLOB NOT NULL, tfs BLOB NOT NULL, "
    "lens BLOB NOT NULL)",
    # the rows as they were, one term's after another (so each term's rows lie together)
    "INSERT INTO word_terms (term) SELECT DISTINCT term FROM word_postings ORDER BY term",
    f"""INSERT INTO word_blobs SELECT (t.tid << {CHUNK_BITS}) | p.chunk, p.ids, p.tfs, p.lens
        FROM word_postings p JOIN word_terms t ON t.term = p.term ORDER BY t.tid, p.chunk""",
    "DROP TABLE word_postings",
    # a segment's rows, for its merge (the expression as the queries below spell it)
    f"CREATE INDEX word_blobs_chunk ON word_blobs(id & {CHUNK_MASK})",
    # The old table's name, as a view that reads and writes the new rows: a process of an
    # older refold still running on this file (a server, when the command line was upgraded
    # first) keeps searching and sealing through it, with the same statements, until it
    # restarts. (Both join conditions: the term's rows by rowid range, a row's term by rowid.)
    f"""CREATE VIEW word_postings (term, chunk, ids, tfs, lens) AS
        SELECT t.term, b.id & {CHUNK_MASK}, b.ids, b.tfs, b.lens FROM word_terms t
        JOIN word_blobs b ON b.id >= t.tid << {CHUNK_BITS}
            AND b.id < (t.tid + 1) << {CHUNK_BITS} AND t.tid = b.id >> {CHUNK_BITS}""",
    # (no conflict clause inside: the statement firing a trigger imposes its own, and an
    # ``INSERT OR REPLACE`` would renumber a term already there, orphaning its rows)
    f"""CREATE TRIGGER word_postings_insert INSTEAD OF INSERT ON word_postings BEGIN
        INSERT INTO word_terms (term) SELECT NEW.term
            WHERE NOT EXISTS (SELECT 1 FROM word_terms WHERE term = NEW.term);
        INSERT INTO word_blobs VALUES (
            ((SELECT tid FROM word_terms WHERE term = NEW.term) << {CHUNK_BITS}) | NEW.chunk,
            NEW.ids, NEW.tfs, NEW.lens);
    END""",
    f"""CREATE TRIGGER word_postings_delete INSTEAD OF DELETE ON word_postings BEGIN
        DELETE FROM word_blobs
            WHERE id = ((SELECT tid FROM word_terms WHERE term = OLD.term) << {CHUNK_BITS})
                | OLD.chunk;
    END""",
)


def _ids(conn: sqlite3.Connection, terms: Iterable[str]) -> dict[str, int]:
    """The numbers of ``terms``, numbering the new ones."""
    wanted = sorted(set(terms))
    conn.executemany("INSERT OR IGNORE INTO word_terms (term) VALUES (?)",
                     [(t,) for t in wanted])
    out: dict[str, int] = {}
    for start in range(0, len(wanted), 900):
        part = wanted[start:start + 900]
        out.update((str(t), int(i)) for t, i in conn.execute(
            f"SELECT term, tid FROM word_terms WHERE term IN ({','.join('?' * len(part))})",
            part))
    return out


def put(conn: sqlite3.Connection, rows: Iterable[Row]) -> None:
    """Write postings rows (replacing those of the same term and chunk)."""
    rows = list(rows)
    numbers = _ids(conn, (r[0] for r in rows))
    conn.executemany("INSERT OR REPLACE INTO word_blobs VALUES (?, ?, ?, ?)",
                     [((numbers[t] << CHUNK_BITS) | c, i, f, n) for t, c, i, f, n in rows])


def of_term(conn: sqlite3.Connection, term: str) -> list[tuple[int, bytes, bytes, bytes]]:
    """One term's rows, (chunk, ids, tfs, lens) in chunk order."""
    return [(int(k) & CHUNK_MASK, bytes(i), bytes(f), bytes(n)) for k, i, f, n in conn.execute(
        "SELECT b.id, b.ids, b.tfs, b.lens FROM word_terms t JOIN word_blobs b "
        f"ON b.id >= t.tid << {CHUNK_BITS} AND b.id < (t.tid + 1) << {CHUNK_BITS} "
        "WHERE t.term = ? ORDER BY b.id", (term,))]


def of_chunks(conn: sqlite3.Connection, start: int, end: int) -> list[Row]:
    """The rows of the chunks in [start, end), by term, then chunk."""
    rows = conn.execute(
        f"SELECT t.term, b.id & {CHUNK_MASK}, b.ids, b.tfs, b.lens FROM word_blobs b "
        f"JOIN word_terms t ON t.tid = b.id >> {CHUNK_BITS} "
        f"WHERE (b.id & {CHUNK_MASK}) >= ? AND (b.id & {CHUNK_MASK}) < ?",
        (start, end)).fetchall()
    rows.sort(key=lambda r: (r[0], r[1]))
    return [(str(t), int(c), bytes(i), bytes(f), bytes(n)) for t, c, i, f, n in rows]


def drop_chunks(conn: sqlite3.Connection, start: int, end: int) -> None:
    """Delete the rows of the chunks in [start, end)."""
    conn.execute(f"DELETE FROM word_blobs WHERE (id & {CHUNK_MASK}) >= ? "
                 f"AND (id & {CHUNK_MASK}) < ?", (start, end))


def one(conn: sqlite3.Connection, term: str, chunk: int) -> tuple[bytes, bytes, bytes] | None:
    """The (ids, tfs, lens) of one term's row of ``chunk``, if it has one."""
    row = conn.execute(
        f"SELECT b.ids, b.tfs, b.lens FROM word_terms t JOIN word_blobs b "
        f"ON b.id = (t.tid << {CHUNK_BITS}) | ? WHERE t.term = ?", (chunk, term)).fetchone()
    return None if row is None else (bytes(row[0]), bytes(row[1]), bytes(row[2]))


def drop_one(conn: sqlite3.Connection, term: str, chunk: int) -> None:
    conn.execute(f"DELETE FROM word_blobs WHERE id = (SELECT (tid << {CHUNK_BITS}) | ? "
                 "FROM word_terms WHERE term = ?)", (chunk, term))


def reset(conn: sqlite3.Connection) -> None:
    """Every row gone (the terms' numbers too)."""
    conn.execute("DELETE FROM word_blobs")
    conn.execute("DELETE FROM word_terms")
