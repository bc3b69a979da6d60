"""The word index's maintenance, inside the writer's transaction: sealing a chunk of postings
(``prepare_seal`` from a read snapshot, ``commit_seal`` if nothing it holds changed since),
merging sealed chunks into segments, folding rewritten and removed messages into the sealed
postings (``fold_changes``), and what is left to do (``unsealed``, ``needs_work``). The index
itself, its blobs and how a search reads and scores it are ``wordindex``'s (its sizes are
read from there at each use: tests set them smaller).
"""

from __future__ import annotations

import sqlite3
from typing import Any

from refold._records import dataclass
from refold.store.sqlite import wordindex, wordrows
from refold.store.sqlite.wordindex import (
    LENS,
    STATE,
    TFS,
    _lengths_of,
    _narrow,
    _pack,
    _widened,
    doc_lengths,
    state,
    tokenizer,
)


@dataclass(frozen=True)
class Sealing:
    """One chunk's postings, tokenized from a read snapshot (no lock held), to be written by
    ``commit_seal`` if nothing the chunk holds changed since (``tail_gen``)."""

    chunk: int
    tail_gen: int
    postings: tuple[tuple[str, int, bytes, bytes, bytes], ...]
    rows: int
    tokens: int


def _watermark(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT indexed_through FROM search_index_state "
                            "WHERE id = 1").fetchone()[0])


def _postings(conn: sqlite3.Connection, key: int, low: int, high: int
              ) -> tuple[tuple[tuple[str, int, bytes, bytes, bytes], ...], int, int]:
    """The postings rows (keyed ``key``, offsets from ``low``) of the ids in [low, high],
    with their rows and tokens."""
    rows = conn.execute("SELECT id, text FROM messages WHERE id >= ? AND id <= ?",
                        (low, high)).fetchall()
    lengths = doc_lengths(conn, low, high)
    counts = tokenizer().counts(rows)
    batch: list[tuple[str, int, bytes, bytes, bytes]] = []
    i = 0
    while i < len(counts):
        term = counts[i][0]
        j = i
        while j < len(counts) and counts[j][0] == term:
            j += 1
        group = counts[i:j]
        batch.append((term, key, _pack("H", [d - low for _, d, _ in group]),
                      _narrow(TFS, [c for _, _, c in group]),
                      _narrow(LENS, [lengths.get(d, 0) for _, d, _ in group])))
        i = j
    return tuple(batch), len(rows), sum(lengths.get(i, 0) for i, _ in rows)


def prepare_seal(conn: sqlite3.Connection) -> Sealing | None:
    """The next chunk's postings, or None when it is not complete under the watermark."""
    chunks, _, _, gen = state(conn)
    if (chunks + 1) * wordindex.CHUNK - 1 > _watermark(conn):
        return None
    low, high = chunks * wordindex.CHUNK, (chunks + 1) * wordindex.CHUNK - 1
    return Sealing(chunks, gen, *_postings(conn, chunks, low, high))


def commit_seal(conn: sqlite3.Connection, plan: Sealing) -> bool:
    """Write a prepared chunk (inside a write transaction); False, writing nothing, when the
    sealed chunks or a row above them changed since it was prepared. The recent blocks go
    (the chunk holds their rows)."""
    chunks, _, _, gen = state(conn)
    if (chunks, gen) != (plan.chunk, plan.tail_gen):
        return False
    _drop_recent(conn)
    wordrows.put(conn, plan.postings)
    conn.execute(f"UPDATE {STATE} SET chunks = ?, rows = rows + ?, tokens = tokens + ?, "
                 "tail_gen = tail_gen + 1 WHERE id = 1",
                 (plan.chunk + 1, plan.rows, plan.tokens))
    if (plan.chunk + 1) % wordindex.SEGMENT == 0:
        _merge(conn, plan.chunk + 1 - wordindex.SEGMENT)
    return True


def _drop_recent(conn: sqlite3.Connection) -> None:
    conn.execute(f"DELETE FROM {wordindex.RECENT_TABLE}")
    conn.execute(f"UPDATE {STATE} SET recent_through = -1, recent_gen = -1, recent_rows = 0, "
                 "recent_tokens = 0 WHERE id = 1")


@dataclass(frozen=True)
class Recent:
    """A recent block's postings (ids ``low`` to ``high``), tokenized from a read snapshot, to
    be written by ``commit_recent`` if the index is as it was then (``since``: its state)."""

    since: tuple[int, ...]
    low: int
    high: int
    postings: tuple[tuple[str, int, bytes, bytes, bytes], ...]
    rows: int
    tokens: int
    replace: bool  # the recent blocks there were are stale: this one replaces them all


def _recent_state(conn: sqlite3.Connection) -> tuple[int, ...]:
    return tuple(int(v) for v in conn.execute(
        f"SELECT chunks, tail_gen, recent_through, recent_gen FROM {STATE} WHERE id = 1"
    ).fetchone())


def recent_due(conn: sqlite3.Connection, indexed_through: int) -> bool:
    """Are ``RECENT_ROWS`` or more indexed rows above the sealed chunks and recent blocks
    (and under the next chunk's end: a complete chunk is sealed instead)?"""
    if indexed_through < wordindex.MIN_ROWS:
        return False
    index = wordindex.sealed(conn)
    high = min(indexed_through, (index.chunks + 1) * wordindex.CHUNK - 1)
    return high - index.low + 1 >= wordindex.RECENT_ROWS


def prepare_recent(conn: sqlite3.Connection) -> Recent | None:
    """The next recent block: the indexed rows above the sealed chunks and recent blocks, up
    to the next chunk's end; None when fewer than ``RECENT_ROWS``."""
    through = _watermark(conn)
    if not recent_due(conn, through):
        return None
    index = wordindex.sealed(conn)
    high = min(through, (index.chunks + 1) * wordindex.CHUNK - 1)
    postings, rows, tokens = _postings(conn, index.low, index.low, high)
    return Recent(_recent_state(conn), index.low, high, postings, rows, tokens,
                  not index.recent)


def commit_recent(conn: sqlite3.Connection, plan: Recent) -> bool:
    """Write a prepared recent block (inside a write transaction); False, writing nothing,
    when the index or a row above the sealed chunks changed since it was prepared. All of it
    lands in one transaction or none does, and the blocks hold only while ``recent_gen`` is
    ``tail_gen``: a block half-written is never seen."""
    if _recent_state(conn) != plan.since:
        return False
    if plan.replace:
        _drop_recent(conn)
    conn.executemany(f"INSERT OR REPLACE INTO {wordindex.RECENT_TABLE} VALUES (?, ?, ?, ?, ?)",
                     plan.postings)
    conn.execute(f"UPDATE {STATE} SET tail_gen = tail_gen + 1, recent_gen = tail_gen + 1, "
                 "recent_through = ?, recent_rows = recent_rows + ?, "
                 "recent_tokens = recent_tokens + ? WHERE id = 1",
                 (plan.high, plan.rows, plan.tokens))
    return True


def seal_recent(conn: sqlite3.Connection) -> bool:
    """Seal the rows above the sealed chunks and recent blocks as a recent block when they are
    ``RECENT_ROWS`` or more (inside the writer's transaction: ``indexer.index_pending``, right
    after indexing them, while their pages are warm)."""
    plan = prepare_recent(conn)
    return plan is not None and commit_recent(conn, plan)


def row_chunk(chunk: int, sealed: int) -> int:
    """The key of the row holding chunk ``chunk``'s postings, ``sealed`` chunks being sealed."""
    start = chunk - chunk % wordindex.SEGMENT
    return start if start + wordindex.SEGMENT <= sealed else chunk


def _merge(conn: sqlite3.Connection, start: int) -> None:
    """Merge the rows of the ``SEGMENT`` chunks from ``start`` into one per term."""
    import numpy as np

    rows = wordrows.of_chunks(conn, start, start + wordindex.SEGMENT)
    merged: list[tuple[str, int, bytes, bytes, bytes]] = []
    i = 0
    while i < len(rows):
        j = i
        while j < len(rows) and rows[j][0] == rows[i][0]:
            j += 1
        group = rows[i:j]
        ids = np.concatenate([np.frombuffer(r[2], dtype="<u2").astype("<u4")
                              + (int(r[1]) - start) * wordindex.CHUNK for r in group]).astype("<u2")
        tfs = np.concatenate([_widened(np, TFS, r[3], len(r[2]) // 2).astype("<u2")
                              for r in group])
        lens = np.concatenate([_widened(np, LENS, r[4], len(r[2]) // 2).astype("<u4")
                               for r in group])
        merged.append((rows[i][0], start, ids.tobytes(),
                       (tfs.astype("<u1") if tfs.max() <= 0xFF else tfs).tobytes(),
                       (lens.astype("<u2") if lens.max() <= 0xFFFF else lens).tobytes()))
        i = j
    wordrows.drop_chunks(conn, start, start + wordindex.SEGMENT)
    wordrows.put(conn, merged)


def _rewrite(np: Any, conn: sqlite3.Connection, term: str, key: int, drop: set[int],
             put: dict[int, tuple[int, int]]) -> None:
    """One postings row with the offsets in ``drop`` taken out and ``put`` (offset: (count,
    length)) set; the row goes when nothing is left."""
    row = wordrows.one(conn, term, key)
    if row:
        count = len(row[0]) // 2
        ids = np.frombuffer(row[0], dtype="<u2").astype(np.int64)
        tfs = _widened(np, TFS, row[1], count).astype(np.int64)
        lens = _widened(np, LENS, row[2], count).astype(np.int64)
    else:
        ids = tfs = lens = np.zeros(0, dtype=np.int64)
    gone = drop | put.keys()
    if gone and len(ids):
        keep = ~np.isin(ids, np.fromiter(gone, dtype=np.int64, count=len(gone)))
        ids, tfs, lens = ids[keep], tfs[keep], lens[keep]
    if put:
        ids = np.concatenate([ids, np.fromiter(put.keys(), dtype=np.int64, count=len(put))])
        tfs = np.concatenate([tfs, np.array([v[0] for v in put.values()], dtype=np.int64)])
        lens = np.concatenate([lens, np.array([v[1] for v in put.values()], dtype=np.int64)])
        order = np.argsort(ids, kind="stable")
        ids, tfs, lens = ids[order], tfs[order], lens[order]
    if not len(ids):
        wordrows.drop_one(conn, term, key)
        return
    wordrows.put(conn, [(term, key, _pack("H", ids.tolist()), _narrow(TFS, tfs.tolist()),
                         _narrow(LENS, lens.tolist()))])


def fold_changes(conn: sqlite3.Connection, indexed_through: int) -> None:
    """Fold the rows of sealed chunks inserted, deleted or rewritten since they were sealed
    (``word_changes``) into the postings. What the index holds for an id is what its first
    change since found (the old text, or nothing for an insert), so per id: that text's
    entries out, the current row's in; every postings row touched is rewritten once. A row
    not yet under the FTS5 watermark waits."""
    changes = conn.execute("SELECT seq, id, text FROM word_changes ORDER BY seq").fetchall()
    if not changes:
        return
    import numpy as np

    first: dict[int, str | None] = {}
    for _seq, doc, old_text in changes:
        first.setdefault(int(doc), old_text)
    current: dict[int, str] = {}
    docs = list(first)
    for start in range(0, len(docs), 900):
        part = docs[start:start + 900]
        current.update((int(i), t) for i, t in conn.execute(
            f"SELECT id, text FROM messages WHERE id IN ({','.join('?' * len(part))})", part))
    ready = [d for d in docs if d not in current or d <= indexed_through]
    if not ready:
        return
    sealed = state(conn)[0]
    tok = tokenizer()
    old = tok.counts([(d, first[d]) for d in ready if first[d] is not None])
    new = tok.counts([(d, current[d]) for d in ready if d in current])
    lengths = _lengths_of(conn, [d for d in ready if d in current])
    edits: dict[tuple[str, int], tuple[set[int], dict[int, tuple[int, int]]]] = {}
    for term, doc, _ in old:
        key = row_chunk(int(doc) // wordindex.CHUNK, sealed)
        edits.setdefault((term, key), (set(), {}))[0].add(int(doc) - key * wordindex.CHUNK)
    for term, doc, count in new:
        key = row_chunk(int(doc) // wordindex.CHUNK, sealed)
        edits.setdefault((term, key), (set(), {}))[1][int(doc) - key * wordindex.CHUNK] = (
            int(count), lengths.get(int(doc), 0))
    for (term, key), (drop, put) in edits.items():
        _rewrite(np, conn, term, key, drop, put)
    rows_delta = sum(1 for d in ready if d in current) - sum(
        1 for d in ready if first[d] is not None)
    tokens_delta = sum(lengths.get(d, 0) for d in ready if d in current) - sum(
        int(c) for _, _, c in old)
    for start in range(0, len(ready), 900):
        part = ready[start:start + 900]
        conn.execute(f"DELETE FROM word_changes WHERE id IN ({','.join('?' * len(part))})",
                     part)
    conn.execute(f"UPDATE {STATE} SET rows = rows + ?, tokens = tokens + ? WHERE id = 1",
                 (rows_delta, tokens_delta))


def reset(conn: sqlite3.Connection) -> None:
    """Empty the index (``refold doctor --repair``); it seals again from the first chunk."""
    wordrows.reset(conn)
    conn.execute(f"DELETE FROM {wordindex.RECENT_TABLE}")
    conn.execute("DELETE FROM word_changes")
    conn.execute(f"UPDATE {STATE} SET chunks = 0, rows = 0, tokens = 0, "
                 "tail_gen = tail_gen + 1, recent_through = -1, recent_gen = -1, "
                 "recent_rows = 0, recent_tokens = 0 WHERE id = 1")


def unsealed(conn: sqlite3.Connection, indexed_through: int) -> int:
    """Complete chunks under the watermark not sealed yet."""
    return max(0, (indexed_through + 1) // wordindex.CHUNK - state(conn)[0])


def needs_work(conn: sqlite3.Connection, indexed_through: int) -> bool:
    """True when ``fold_changes`` has changes to fold in, or (on an archive of ``MIN_ROWS`` or
    more) a chunk to seal."""
    if bool(conn.execute("SELECT EXISTS (SELECT 1 FROM word_changes)").fetchone()[0]):
        return True
    return indexed_through >= wordindex.MIN_ROWS and bool(unsealed(conn, indexed_through))
