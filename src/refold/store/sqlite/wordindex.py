"""The word impact index: exact BM25 over every match of a sentence query, without FTS5's scan.

FTS5 ranks an OR query by walking every posting of every term and calling ``bm25()`` on each
matching row: at a million messages a question of common words costs tens of milliseconds, a
real sentence hundreds. This index holds the same postings in a form scored at once: by the
C scorer where it was built (``nativescore.py``), else by NumPy (or, for a query of few
postings, the standard library: ``plainscore.py``), every path to the same bits.

Layout (migrations 9 and 18):

- the postings rows (term, chunk, ids, tfs, lens), stored as ``wordrows`` says (migration
  18: by term number and chunk): for each FTS5 token (as the word index's
  tokenizer emits it: porter, unicode61, diacritics removed) and each *sealed chunk* of
  ``CHUNK`` message ids, the ids holding it (uint16 offsets from the chunk's first id), their
  term frequencies (uint8, or uint16 in a row where one exceeds 255) and their lengths in
  tokens (uint16, or uint32), little-endian. Once the
  ``SEGMENT`` chunks of a segment are all sealed, each term's rows of it merge into one, keyed
  by the segment's first chunk (``row_chunk``): a term at a million messages is ~30 rows.
- ``word_index_state``: how many chunks are sealed (``chunks``: ids below
  ``chunks * CHUNK``), their rows and tokens, and ``tail_gen``, bumped when a row above them
  changes.
- ``word_changes``: the old text of every row of a sealed chunk deleted or rewritten since it
  was sealed, or NULL for a row inserted there (an id reused after the newest rows were
  deleted; SQL triggers); ``fold_changes`` (from ``indexer.index_pending``) takes the old
  postings out and puts the new ones in.

A chunk is sealed once every id in it is under the FTS5 watermark: ``prepare_seal`` tokenizes
it from a read snapshot, ``commit_seal`` writes it if nothing changed since (a search seals
one, ``refold index`` all; appends and imports never). The rows above the sealed
chunks are sealed as they are indexed, in *recent blocks* of ``RECENT_ROWS`` rows or more
(``RECENT_MIGRATION``), dropped when their chunk seals. The rows above those (the *tail*: under ``RECENT_ROWS`` plus the unindexed
batch when caught up; up to a chunk while the blocks are stale) are tokenized per process
into an in-memory FTS5 table (``Tail``), kept in step by id and ``tail_gen``. Tokens always come from SQLite's own FTS5 tokenizer on the same configuration,
in memory, so the terms and counts are FTS5's.

The scoring is FTS5's ``bm25()`` to the bit: the same collection size and average length (read
from the FTS5 index's own totals record), the same document frequencies (sealed postings plus
tail), the same expression evaluated in the same order in float64, so ranks match the word
index's. The fast path is used only when that holds; otherwise (NumPy missing for a query
``plainscore`` leaves to it, a phrase term with too many repeated tokens to count, changes not
yet folded in, a tail too long, totals that disagree) search takes the FTS5 path, which gives
the same answer slower.
"""

from __future__ import annotations

import math
import os
import sqlite3
import sys
import threading
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from refold._records import dataclass
from refold.store.sqlite import porter, readahead, wordrows

CHUNK = 4096  # message ids per sealed chunk
SEGMENT = 16  # sealed chunks merged into one row per term once all 16 are sealed (uint16 ids)
MAX_TAIL = 3 * CHUNK  # ids above the sealed chunks the per-process tail may hold
MIN_ROWS = 8 * CHUNK  # below this FTS5 answers in a few ms: no NumPy, no sealing on search
RECENT = 1 << 40  # a recent block's rows, read, are keyed RECENT plus its first id
RECENT_ROWS = 256  # indexed rows above the sealed chunks and blocks that make a recent block
RECENT_TABLE = "word_recent"
TOKENIZE = "porter unicode61 remove_diacritics 2"  # messages_fts's tokenizer (schema.py)
PORTER_UNICODE61 = "porter unicode61 remove_diacritics 2"  # what ``porter`` computes
K1 = 1.2
B = 0.75
STATE = "word_index_state"
_BIG = sys.byteorder == "big"
T = TypeVar("T")

MIGRATION = (
    """CREATE TABLE word_postings (
        term TEXT NOT NULL, chunk INTEGER NOT NULL,
        ids BLOB NOT NULL, tfs BLOB NOT NULL, lens BLOB NOT NULL,
        PRIMARY KEY (term, chunk)) WITHOUT ROWID""",
    "CREATE INDEX word_postings_chunk ON word_postings(chunk)",
    f"""CREATE TABLE {STATE} (
        id INTEGER PRIMARY KEY CHECK (id = 1), chunks INTEGER NOT NULL,
        rows INTEGER NOT NULL, tokens INTEGER NOT NULL, tail_gen INTEGER NOT NULL)""",
    # tail_gen starts at random: a database recreated at the same path is never mistaken
    # for the one a process's tail was filled from
    f"INSERT INTO {STATE} VALUES (1, 0, 0, 0, abs(random() % 1000000000))",
    "CREATE TABLE word_changes (seq INTEGER PRIMARY KEY, id INTEGER NOT NULL, text TEXT)",
    # an id under the sealed chunks reused after the newest rows were deleted
    f"""CREATE TRIGGER word_index_insert AFTER INSERT ON messages
        WHEN new.id < (SELECT chunks FROM {STATE}) * {CHUNK} BEGIN
        INSERT INTO word_changes (id, text) VALUES (new.id, NULL);
    END""",
    f"""CREATE TRIGGER word_index_delete AFTER DELETE ON messages BEGIN
        INSERT INTO word_changes (id, text) SELECT old.id, old.text
            WHERE old.id < (SELECT chunks FROM {STATE}) * {CHUNK};
        UPDATE {STATE} SET tail_gen = tail_gen + 1 WHERE old.id >= chunks * {CHUNK};
    END""",
    f"""CREATE TRIGGER word_index_update AFTER UPDATE OF text ON messages
        WHEN old.text IS NOT new.text BEGIN
        INSERT INTO word_changes (id, text) SELECT old.id, old.text
            WHERE old.id < (SELECT chunks FROM {STATE}) * {CHUNK};
        UPDATE {STATE} SET tail_gen = tail_gen + 1 WHERE old.id >= chunks * {CHUNK};
    END""",
)

# Recent blocks (migration 14): the rows above the sealed chunks, sealed as they are indexed in
# blocks of at least ``RECENT_ROWS`` (``indexer.index_pending``, ``wordseal.seal_recent``), so
# a fresh process tokenizes the few rows above them instead of up to a chunk. Their postings
# rows live in a small table of their own (``word_recent``, by term and the block's first id:
# cheap to write, a page or two a term to read; rows of the big table would each land on a
# cold page of their own); ``recent_through`` is the last id they hold, ``recent_rows`` and
# ``recent_tokens`` their totals. They hold only
# while ``recent_gen`` equals ``tail_gen``: a row of theirs deleted or rewritten bumps it (the
# triggers above), and so does an id under ``recent_through`` inserted anew (below), and a
# chunk sealed (which deletes them); stale, they are left out of every search until the next
# block replaces them all.
RECENT_MIGRATION = (
    f"""CREATE TABLE {RECENT_TABLE} (
        term TEXT NOT NULL, start INTEGER NOT NULL,
        ids BLOB NOT NULL, tfs BLOB NOT NULL, lens BLOB NOT NULL,
        PRIMARY KEY (term, start)) WITHOUT ROWID""",
    f"ALTER TABLE {STATE} ADD COLUMN recent_through INTEGER NOT NULL DEFAULT -1",
    f"ALTER TABLE {STATE} ADD COLUMN recent_gen INTEGER NOT NULL DEFAULT -1",
    f"ALTER TABLE {STATE} ADD COLUMN recent_rows INTEGER NOT NULL DEFAULT 0",
    f"ALTER TABLE {STATE} ADD COLUMN recent_tokens INTEGER NOT NULL DEFAULT 0",
    "DROP TRIGGER word_index_insert",
    f"""CREATE TRIGGER word_index_insert AFTER INSERT ON messages
        WHEN new.id <= (SELECT max(chunks * {CHUNK} - 1, recent_through) FROM {STATE}) BEGIN
        INSERT INTO word_changes (id, text) SELECT new.id, NULL
            WHERE new.id < (SELECT chunks FROM {STATE}) * {CHUNK};
        UPDATE {STATE} SET tail_gen = tail_gen + 1 WHERE new.id >= chunks * {CHUNK};
    END""",
)


# -- tokens, from SQLite's own tokenizer --------------------------------------------------------
def memory_fts(table: str) -> sqlite3.Connection:
    """An in-memory connection holding a contentless FTS5 ``table`` with the word index's
    tokenizer and ``<table>_terms``, its per-instance vocabulary."""
    conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
    conn.execute(f"CREATE VIRTUAL TABLE {table} USING fts5(text, content='', "
                 f"tokenize='{TOKENIZE}')")
    conn.execute(f"CREATE VIRTUAL TABLE {table}_terms USING fts5vocab({table}, 'instance')")
    return conn


_PER_FILE_LOCK = threading.Lock()


def per_file(copies: dict[str, T], path: str, make: Callable[[], T]) -> T:
    """The process's one ``copies[path]`` (made on first use; at most 16 files kept)."""
    with _PER_FILE_LOCK:
        found = copies.get(path)
        if found is None:
            if len(copies) > 16:
                copies.clear()
            found = copies[path] = make()
        return found


class Tokenizer:
    """FTS5's tokens for texts: an in-memory FTS5 table with the word index's tokenizer. One
    per process (``tokenizer()``); every use holds its lock."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.conn = memory_fts("scratch")
        self.words: dict[str, tuple[str, ...]] = {}

    @contextmanager
    def scratch(self) -> Iterator[sqlite3.Connection]:
        """The scratch table in one transaction, committed empty (each use ends with its
        ``delete-all``) or rolled back: no row of a failed use is seen by the next."""
        with self.lock:
            self.conn.execute("BEGIN")
            try:
                yield self.conn
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            self.conn.execute("COMMIT")

    def counts(self, rows: Iterable[tuple[int, str | None]]) -> list[tuple[str, int, int]]:
        """(term, id, count) for the rows' texts, by term then id."""
        with self.scratch() as conn:
            conn.executemany("INSERT INTO scratch(rowid, text) VALUES (?, ?)",
                             ((i, t or "") for i, t in rows))
            out = conn.execute("SELECT term, doc, count(*) FROM scratch_terms "
                               "GROUP BY term, doc").fetchall()
            conn.execute("INSERT INTO scratch(scratch) VALUES ('delete-all')")
        return out

    def term_counts(self, rows: Iterable[tuple[int, str | None]],
                    terms: Iterable[str]) -> dict[str, dict[int, int]]:
        """How often each of ``terms`` (tokens) occurs in each row's text: {term: {id: n}}."""
        with self.scratch() as conn:
            conn.executemany("INSERT INTO scratch(rowid, text) VALUES (?, ?)",
                             ((i, t or "") for i, t in rows))
            out = {term: {int(d): int(n) for d, n in conn.execute(
                       "SELECT doc, count(*) FROM scratch_terms WHERE term = ? GROUP BY doc",
                       (term,))} for term in dict.fromkeys(terms)}
            conn.execute("INSERT INTO scratch(scratch) VALUES ('delete-all')")
        return out

    def matching(self, rows: Iterable[tuple[int, str | None]], match: str) -> set[int]:
        """The ids among ``rows`` whose text matches the FTS5 expression ``match``."""
        with self.scratch() as conn:
            conn.executemany("INSERT INTO scratch(rowid, text) VALUES (?, ?)",
                             ((i, t or "") for i, t in rows))
            out = {int(r[0]) for r in conn.execute(
                "SELECT rowid FROM scratch WHERE scratch MATCH ?", (match,))}
            conn.execute("INSERT INTO scratch(scratch) VALUES ('delete-all')")
        return out

    def phrase_counts(self, rows: Iterable[tuple[int, str | None]],
                      tokens: Sequence[str]) -> dict[int, int]:
        """How often the token sequence ``tokens`` occurs in each row's text (overlaps
        counted, as FTS5 counts a phrase's instances)."""
        with self.scratch() as conn:
            conn.executemany("INSERT INTO scratch(rowid, text) VALUES (?, ?)",
                             ((i, t or "") for i, t in rows))
            at: dict[str, dict[int, set[int]]] = {}
            for token in dict.fromkeys(tokens):
                found: dict[int, set[int]] = {}
                for doc, offset in conn.execute(
                        "SELECT doc, offset FROM scratch_terms WHERE term = ?", (token,)):
                    found.setdefault(int(doc), set()).add(int(offset))
                at[token] = found
            conn.execute("INSERT INTO scratch(scratch) VALUES ('delete-all')")
        first = at[tokens[0]]
        return {doc: sum(1 for p in starts if all(
                    p + i in at[t].get(doc, ()) for i, t in enumerate(tokens)))
                for doc, starts in first.items()}

    def word(self, word: str) -> tuple[str, ...]:
        """The tokens FTS5 makes of one query word, in order (cached)."""
        found = self.words.get(word)
        if found is not None:
            return found
        with self.scratch() as conn:
            conn.execute("INSERT INTO scratch(rowid, text) VALUES (1, ?)", (word,))
            tokens = tuple(str(r[0]) for r in conn.execute(
                "SELECT term FROM scratch_terms ORDER BY offset"))
            conn.execute("INSERT INTO scratch(scratch) VALUES ('delete-all')")
        if len(self.words) > 50_000:
            self.words.clear()
        self.words[word] = tokens
        return tokens


def word_tokens(word: str) -> tuple[str, ...]:
    """The tokens FTS5 makes of one query word: a plain ASCII word's stem computed here
    (``porter``: no FTS5 table to open in a new process), anything else FTS5's own."""
    token = porter.word_token(word) if TOKENIZE == PORTER_UNICODE61 else None
    return (token,) if token is not None else tokenizer().word(word)


_TOKENIZER: Tokenizer | None = None
_TOKENIZER_LOCK = threading.Lock()


def tokenizer() -> Tokenizer:
    global _TOKENIZER
    with _TOKENIZER_LOCK:
        if _TOKENIZER is None:
            _TOKENIZER = Tokenizer()
        return _TOKENIZER


# -- SQLite varints (FTS5's totals record and docsize rows) --------------------------------------
def varints(data: bytes) -> list[int]:
    out: list[int] = []
    i = 0
    while i < len(data):
        value = 0
        for n in range(9):
            byte = data[i]
            i += 1
            if n == 8:
                value = (value << 8) | byte
                break
            value = (value << 7) | (byte & 0x7F)
            if byte < 0x80:
                break
        out.append(value)
    return out


def fts_totals(conn: sqlite3.Connection, table: str = "messages_fts") -> tuple[int, int]:
    """(rows, tokens) the FTS5 index counts (its averages record, what ``bm25()`` reads)."""
    row = conn.execute(f"SELECT block FROM {table}_data WHERE id = 1").fetchone()
    if row is None or not row[0]:
        return 0, 0
    values = varints(bytes(row[0]))
    return values[0], (values[1] if len(values) > 1 else 0)


def doc_lengths(conn: sqlite3.Connection, low: int, high: int) -> dict[int, int]:
    """Tokens per message for ids in [low, high] (FTS5's docsize rows)."""
    return {int(i): varints(bytes(sz))[0] if sz else 0 for i, sz in conn.execute(
        "SELECT id, sz FROM messages_fts_docsize WHERE id >= ? AND id <= ?", (low, high))}


def _lengths_of(conn: sqlite3.Connection, ids: Sequence[int]) -> dict[int, int]:
    out: dict[int, int] = {}
    for start in range(0, len(ids), 500):
        part = ids[start:start + 500]
        marks = ",".join("?" * len(part))
        out.update((int(i), varints(bytes(sz))[0] if sz else 0) for i, sz in conn.execute(
            f"SELECT id, sz FROM messages_fts_docsize WHERE id IN ({marks})", list(part)))
    return out


# -- blobs -------------------------------------------------------------------------------------
def _pack(typecode: str, values: Iterable[int]) -> bytes:
    arr = array(typecode, values)
    if _BIG:
        arr.byteswap()
    return arr.tobytes()


# Term frequencies are one byte each when all fit (nearly always), else two; lengths two bytes,
# else four. A row's blob length over its number of ids tells which.
TFS = ("B", "H")
LENS = ("H", "I")
_DTYPES = {"B": "<u1", "H": "<u2", "I": "<u4"}


def _narrow(kinds: tuple[str, str], values: Sequence[int]) -> bytes:
    small, wide = kinds
    limit = (1 << (8 * array(small).itemsize)) - 1
    if max(values, default=0) <= limit:
        return _pack(small, values)
    top = (1 << (8 * array(wide).itemsize)) - 1
    return _pack(wide, [min(v, top) for v in values])


def _width(kinds: tuple[str, str], blob: bytes, count: int) -> str:
    return kinds[0] if len(blob) == count * array(kinds[0]).itemsize else kinds[1]


def _widened(np: Any, kinds: tuple[str, str], blob: bytes, count: int) -> Any:
    """A blob as a NumPy array of its own width."""
    return np.frombuffer(blob, dtype=_DTYPES[_width(kinds, blob, count)])


# -- the index's state (its maintenance: wordseal.py) ----------------------------------------
def state(conn: sqlite3.Connection) -> tuple[int, int, int, int]:
    row = conn.execute(f"SELECT chunks, rows, tokens, tail_gen FROM {STATE} WHERE id = 1").fetchone()
    return int(row[0]), int(row[1]), int(row[2]), int(row[3])


@dataclass(frozen=True)
class Sealed:
    """What the index holds: ``chunks`` sealed, ``tail_gen``, and the ids ``low`` and up
    that the tail must cover (above the recent blocks when they hold, else above the chunks);
    ``rows`` and ``tokens`` count what is under ``low``; ``recent``: the recent blocks hold."""

    chunks: int
    gen: int
    low: int
    rows: int
    tokens: int
    recent: bool


def sealed(conn: sqlite3.Connection) -> Sealed:
    chunks, rows, tokens, gen, through, recent_gen, recent_rows, recent_tokens = conn.execute(
        f"SELECT chunks, rows, tokens, tail_gen, recent_through, recent_gen, recent_rows, "
        f"recent_tokens FROM {STATE} WHERE id = 1").fetchone()
    if recent_gen == gen and through >= chunks * CHUNK:
        return Sealed(chunks, gen, through + 1, rows + recent_rows, tokens + recent_tokens, True)
    return Sealed(chunks, gen, chunks * CHUNK, rows, tokens, False)


def base_of(chunk: int) -> int:
    """The first id a postings row's offsets count from (a chunk's, or a recent block's)."""
    return chunk - RECENT if chunk >= RECENT else chunk * CHUNK


# -- the per-process tail ------------------------------------------------------------------------
class Tail:
    """Postings of the rows above the sealed chunks, for one database file: an in-memory FTS5
    table filled from the ledger, extended as the watermark moves, refilled when the sealed
    chunks or ``tail_gen`` change."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.conn: sqlite3.Connection | None = None  # made on the first row (often none)
        self.key: tuple[int, int, int, int] | None = None  # (file, chunks, tail_gen, low)
        self.through = -1  # highest id loaded
        self.lengths: dict[int, int] = {}
        self.skipped: tuple[int, int, int, int] | None = None  # a key answered without filling

    def filled_for(self, file: int, chunks: int, gen: int, low: int) -> bool:
        return self.key == (file, chunks, gen, low)

    def sync(self, db: sqlite3.Connection, file: int, chunks: int, gen: int,
             indexed_through: int, low: int) -> None:
        """Hold exactly the indexed rows with ids in [low, indexed_through] (``low``: the
        first id above the sealed chunks and the recent blocks, ``Sealed.low``)."""
        if self.key != (file, chunks, gen, low) or self.through > indexed_through:
            if self.conn is not None:
                self.conn.execute("INSERT INTO tail(tail) VALUES ('delete-all')")
            self.key, self.through, self.lengths = (file, chunks, gen, low), low - 1, {}
        if indexed_through <= self.through:
            return
        rows = db.execute("SELECT id, text FROM messages WHERE id > ? AND id <= ?",
                          (self.through, indexed_through)).fetchall()
        lengths = doc_lengths(db, self.through + 1, indexed_through)
        key, self.key = self.key, None  # until the rows are in: interrupted, it refills
        if self.conn is None:
            self.conn = memory_fts("tail")
        self.conn.execute("BEGIN")
        try:
            self.conn.executemany("INSERT INTO tail(rowid, text) VALUES (?, ?)",
                                  ((i, t or "") for i, t in rows))
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")
        self.lengths.update(lengths)
        self.through = indexed_through
        self.key = key

    def postings(self, term: str) -> list[tuple[int, int]]:
        if self.conn is None:
            return []
        return [(int(d), int(c)) for d, c in self.conn.execute(
            "SELECT doc, count(*) FROM tail_terms WHERE term = ? GROUP BY doc ORDER BY doc",
            (term,))]


_TAILS: dict[str, Tail] = {}


def tail_for(path: str) -> Tail:
    return per_file(_TAILS, path, Tail)


LAZY_TAIL = 1024  # tail rows above which a process's first search reads only the matching ones


def query_tail(conn: sqlite3.Connection, terms: Sequence[tuple[str, str]],
               tokens: Sequence[str], low: int, through: int
               ) -> tuple[dict[str, list[tuple[int, int]]], dict[int, int]] | None:
    """What ``Tail`` would hold for one query, without tokenizing the whole tail: each
    single-token term's (id, count) from the rows in [low, through] that FTS5 matches for it
    (their text tokenized here), and the tail's lengths from FTS5's docsize rows. None when a
    row FTS5 matches does not hold the token (then the whole tail is read, as before)."""
    lengths = doc_lengths(conn, low, through)
    matched: dict[str, list[int]] = {}
    for (_, match), token in zip(terms, tokens, strict=True):
        if token not in matched:
            matched[token] = [int(r[0]) for r in conn.execute(
                "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? AND rowid >= ? "
                "AND rowid <= ? ORDER BY rowid", (match, low, through))]
    ids = sorted({i for found in matched.values() for i in found})
    rows: list[tuple[int, str | None]] = []
    for start in range(0, len(ids), 900):
        part = ids[start:start + 900]
        rows.extend(conn.execute(f"SELECT id, text FROM messages WHERE id IN "
                                 f"({','.join('?' * len(part))})", part))
    counts = tokenizer().term_counts(rows, matched) if rows else {}
    postings: dict[str, list[tuple[int, int]]] = {}
    for token, found in matched.items():
        held = counts.get(token, {})
        if len(held) != len(found) or any(i not in held for i in found):
            return None
        postings[token] = [(i, held[i]) for i in found]
    return postings, lengths


# -- scoring -------------------------------------------------------------------------------------
def _numpy() -> Any:
    try:
        import numpy
    except ImportError:  # pragma: no cover - numpy ships with refold's dependencies
        return None
    return numpy


def database_path(conn: sqlite3.Connection) -> str | None:
    row = conn.execute("PRAGMA database_list").fetchone()
    return str(row[2]) if row and row[2] else None


class WordScores:
    """BM25 of every message holding any of the terms, as FTS5 ranks them: ``raw`` over the
    id space (float64), ``count`` of terms held, ``seed`` the rarest term's postings, and
    ``held`` each term's matching ids (ascending), in the order of the terms."""

    def __init__(self, raw: Any, count: Any, seed: Any, held: Sequence[Any] = ()) -> None:
        self.raw, self.count, self.seed, self.held = raw, count, seed, list(held)
        self._ascending: set[int] = set()  # terms whose ids were checked ascending

    def holding(self, term: int, ids: Any) -> Any:
        """Which of ``ids`` hold term number ``term`` (a boolean array)."""
        import numpy as np

        if term not in self._ascending:  # postings come ascending; checked once, not trusted
            have = self.held[term]
            if len(have) > 1 and not bool(np.all(have[1:] > have[:-1])):
                self.held[term] = np.unique(have)
            self._ascending.add(term)
        have = self.held[term]
        if not len(have):
            return np.zeros(len(ids), dtype=bool)
        at = np.minimum(np.searchsorted(have, ids), len(have) - 1)
        return have[at] == ids


Parts = list[tuple[int, bytes, bytes, bytes]]  # one token's (chunk, ids, tfs, lens) rows


def _parts(conn: sqlite3.Connection, term: str, recent: bool) -> Parts:
    """One token's sealed postings rows, in id order: its chunks', then (if they hold) its
    recent blocks', keyed ``RECENT`` plus their first id (``base_of``)."""
    rows = wordrows.of_term(conn, term)
    if recent:
        rows += [(RECENT + int(c), bytes(i), bytes(t), bytes(n)) for c, i, t, n in conn.execute(
            f"SELECT start, ids, tfs, lens FROM {RECENT_TABLE} WHERE term = ? ORDER BY start",
            (term,))]
    return rows


def _postings(np: Any, parts: Parts, tail: list[tuple[int, int]],
              tail_lengths: dict[int, int]) -> tuple[Any, Any, Any]:
    """One token's (ids int64, tf float64, lengths float64), sealed chunks then the tail."""
    sizes = np.fromiter((len(p[1]) // 2 for p in parts), dtype=np.int64, count=len(parts))
    bases = np.fromiter((base_of(p[0]) for p in parts), dtype=np.int64, count=len(parts))
    ids = (np.frombuffer(b"".join(p[1] for p in parts), dtype="<u2").astype(np.int64)
           + np.repeat(bases, sizes))
    if parts:
        tf = np.concatenate([_widened(np, TFS, p[2], len(p[1]) // 2).astype(np.float64)
                             for p in parts])
        dl = np.concatenate([_widened(np, LENS, p[3], len(p[1]) // 2).astype(np.float64)
                             for p in parts])
    else:
        tf, dl = np.zeros(0), np.zeros(0)
    if tail:
        ids = np.concatenate([ids, np.array([d for d, _ in tail], dtype=np.int64)])
        tf = np.concatenate([tf, np.array([c for _, c in tail], dtype=np.float64)])
        dl = np.concatenate([dl, np.array([tail_lengths.get(d, 0) for d, _ in tail],
                                          dtype=np.float64)])
    return ids, tf, dl


PHRASE_RECOUNT = 300  # phrase matches whose count needs their text re-tokenized, at most


def _phrase(np: Any, conn: sqlite3.Connection, match: str, tokens: tuple[str, ...],
            arrays: list[tuple[Any, Any, Any]]) -> tuple[Any, Any, Any] | None:
    """A phrase term's postings: the rows FTS5 matches for it, each with the phrase's count
    (1 where a token occurs once; else counted from the row's tokens), or None if too many
    rows need counting."""
    rows = conn.execute("SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? "
                        "ORDER BY rowid", (match,)).fetchall()  # FTS5's own order: no sort
    matched = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    if not len(matched):
        return matched, np.zeros(0), np.zeros(0)
    least = None
    dl = None
    for ids, tf, lengths in arrays:
        at = np.minimum(np.searchsorted(ids, matched), max(len(ids) - 1, 0))
        if not len(ids) or not np.array_equal(ids[at], matched):
            return None  # the index and FTS5 disagree: let FTS5 answer
        least = tf[at] if least is None else np.minimum(least, tf[at])
        dl = lengths[at] if dl is None else dl
    assert least is not None and dl is not None
    counts = np.ones(len(matched))
    recount = np.flatnonzero(least > 1)
    if len(recount) > PHRASE_RECOUNT:
        return None
    if len(recount):
        ids = [int(i) for i in matched[recount]]
        marks = ",".join("?" * len(ids))
        rows = conn.execute(f"SELECT id, text FROM messages WHERE id IN ({marks})",
                            ids).fetchall()
        found = tokenizer().phrase_counts(rows, tokens)
        counts[recount] = [float(found.get(i, 0)) for i in ids]
    keep = counts > 0
    return matched[keep], counts[keep], dl[keep]


@dataclass(frozen=True)
class Gathered:
    """What scoring a query's word terms needs, read once: each term's tokens (``made``, in
    query order), every token's sealed postings rows (``parts``) and tail postings, the tail's
    lengths and FTS5's totals (``bm25()``'s collection size and average length)."""

    terms: tuple[tuple[str, str], ...]
    made: tuple[tuple[str, ...], ...]
    parts: dict[str, Parts]
    tail: dict[str, list[tuple[int, int]]]
    tail_lengths: dict[int, int]
    total_rows: int
    avgdl: float

    def postings(self) -> int:
        """How many postings the terms' tokens hold (what scoring them all costs)."""
        return sum(len(p[1]) // 2 for parts in self.parts.values() for p in parts) + sum(
            len(found) for found in self.tail.values())


def gather(conn: sqlite3.Connection, terms: Sequence[tuple[str, str]],
           indexed_through: int) -> Gathered | None:
    """The inputs of ``term_weights`` for ``terms`` ((text, its FTS5 string) each, in query
    order), or None when this index cannot answer exactly (then FTS5 does)."""
    if indexed_through < MIN_ROWS or not terms:
        return None
    path = database_path(conn)
    if path is None:
        return None
    if conn.execute("SELECT EXISTS (SELECT 1 FROM word_changes)").fetchone()[0]:
        return None
    index = sealed(conn)
    chunks, gen, low = index.chunks, index.gen, index.low
    if indexed_through - low >= MAX_TAIL:
        return None
    made = [word_tokens(text) for text, _ in terms]
    if any(not m for m in made):
        return None
    total_rows, total_tokens = fts_totals(conn)
    tail = tail_for(path)
    with tail.lock:
        try:
            file = os.stat(path).st_ino
        except OSError:
            return None
        key = (file, chunks, gen, low)
        once = None
        # A process's first search over a long tail (a CLI search) reads the tail rows its
        # terms match instead of tokenizing every one; a second search fills the tail.
        if not tail.filled_for(*key) and tail.skipped != key \
                and indexed_through - low + 1 > LAZY_TAIL and all(len(m) == 1 for m in made):
            once = query_tail(conn, terms, [m[0] for m in made], low, indexed_through)
        if once is not None:
            tail.skipped = key
            tail_postings, tail_lengths = once
        else:
            tail.sync(conn, file, chunks, gen, indexed_through, low)
            tail_postings = {t: tail.postings(t) for m in made for t in m}
            tail_lengths = dict(tail.lengths)
        tail_rows, tail_tokens = len(tail_lengths), sum(tail_lengths.values())
        if total_rows != index.rows + tail_rows or total_tokens != index.tokens + tail_tokens \
                or total_rows <= 0:
            return None
    if readahead.cold():  # the terms' numbers, then their rows, asked for at once
        tokens = sorted({t for m in made for t in m})
        readahead.ask(conn, [
            readahead.Want(wordrows.TERMS_INDEX, keys=sorted(t.encode() for t in tokens)),
            # and the small trees a question reads next (the recent blocks, the words glued
            # to CJK text)
            readahead.Want(RECENT_TABLE, most=64), readahead.Want("glued_words", most=16)])
        numbers = [int(r[0]) for r in conn.execute(
            f"SELECT tid FROM word_terms WHERE term IN ({','.join('?' * len(tokens))})",
            tokens)]
        readahead.table_rows(conn, "word_blobs", [
            (n << wordrows.CHUNK_BITS, ((n + 1) << wordrows.CHUNK_BITS) - 1) for n in numbers])
    parts = {t: _parts(conn, t, index.recent) for m in made for t in m}
    return Gathered(tuple(terms), tuple(made), parts, tail_postings, tail_lengths, total_rows,
                    float(total_tokens) / float(total_rows))


def term_weights(conn: sqlite3.Connection, terms: Sequence[tuple[str, str]],
                 indexed_through: int, gathered: Gathered | None = None
                 ) -> list[tuple[Any, Any]] | None:
    """Each term's (ids, bm25 weights) as FTS5's ``bm25()`` of the OR of ``terms`` ((text,
    its FTS5 string) each, in query order) adds them up, or None when this index cannot
    answer exactly (then FTS5 does). ``gathered``: ``gather``'s answer, if already read."""
    np = _numpy()
    if np is None:
        return None
    if gathered is None:
        gathered = gather(conn, terms, indexed_through)
    if gathered is None:
        return None
    total_rows, avgdl = gathered.total_rows, gathered.avgdl
    loaded: dict[str, tuple[Any, Any, Any]] = {}

    def load(token: str) -> tuple[Any, Any, Any]:
        if token not in loaded:
            loaded[token] = _postings(np, gathered.parts[token], gathered.tail[token],
                                      gathered.tail_lengths)
        return loaded[token]

    out: list[tuple[Any, Any]] = []
    for (_, match), term_tokens in zip(gathered.terms, gathered.made, strict=True):
        if len(term_tokens) == 1:
            ids, tf, dl = load(term_tokens[0])
        else:
            phrase = _phrase(np, conn, match, term_tokens, [load(t) for t in term_tokens])
            if phrase is None:
                return None
            ids, tf, dl = phrase
        hits = len(ids)
        idf = math.log((total_rows - hits + 0.5) / (hits + 0.5))
        if idf <= 0.0:
            idf = 1e-6
        # fts5_aux.c fts5Bm25Function, term for term and in its order of operations
        out.append((ids, idf * ((tf * (K1 + 1.0)) / (tf + K1 * (1 - B + B * dl / avgdl)))))
    return out


def word_scores(conn: sqlite3.Connection, terms: Sequence[tuple[str, str]],
                indexed_through: int, gathered: Gathered | None = None) -> WordScores | None:
    """FTS5 ``bm25()`` of the OR of ``terms`` for every message (``term_weights``)."""
    weights = term_weights(conn, terms, indexed_through, gathered)
    if weights is None:
        return None
    import numpy as np

    size = max(indexed_through, 0) + 1
    present = [(ids, w) for ids, w in weights if len(ids)]
    count = np.zeros(size, dtype=np.uint8)  # terms held (at most MAX_NATURAL_TERMS = 24)
    held = [ids for ids, _ in weights]
    if not present:
        return WordScores(np.zeros(size), count, np.zeros(0, np.int64), held)
    raw = np.bincount(np.concatenate([ids for ids, _ in present]),
                      weights=np.concatenate([w for _, w in present]), minlength=size)
    for ids, _ in present:  # a term's ids are distinct: one increment each
        count[ids] += 1
    seed = min((ids for ids, _ in present), key=len)
    return WordScores(raw, count, seed, held)


def best_of_term(conn: sqlite3.Connection, text: str, match: str, indexed_through: int,
                 limit: int) -> list[tuple[int, float]] | None:
    """(id, FTS5 rank) of the best ``limit`` matches of one term, ordered as FTS5's
    ``ORDER BY rank, rowid DESC`` orders them, or None (then FTS5 answers)."""
    gathered = gather(conn, [(text, match)], indexed_through)
    if gathered is None:
        return None
    from refold.store.sqlite import nativescore, plainscore

    if nativescore.enabled():
        return nativescore.best_of_term(conn, gathered, limit)  # the C scorer
    if plainscore.use_plain(gathered):  # few postings: no NumPy (its import costs more)
        return plainscore.best_of_term(conn, gathered, limit)
    weights = term_weights(conn, [(text, match)], indexed_through, gathered)
    if weights is None:
        return None
    import numpy as np

    ids, scores = weights[0]
    if len(ids) > limit:
        bar = np.partition(scores, -limit)[-limit]
        keep = scores >= bar
        ids, scores = ids[keep], scores[keep]
    order = np.lexsort((-ids, -scores))[:limit]
    return [(int(i), -float(v)) for i, v in zip(ids[order], scores[order], strict=True)]
