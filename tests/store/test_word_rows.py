"""The word index's rows by term number (``wordrows.py``, migration 18): an archive sealed in
the old layout (one ``WITHOUT ROWID`` table keyed by term and chunk) is carried over whole,
and searches the same after it as before; a term's rows come back in chunk order; the
segment merge and the folding of changes work on the new rows."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest

from refold.store.base import SearchQuery
from refold.store.sqlite import indexer, wordindex, wordrows
from refold.store.sqlite.schema import MIGRATIONS
from refold.store.sqlite.store import SQLiteStore

WORDS = ["alpha", "beta", "gamma", "delta", "support", "group", "deploy", "build", "failed",
         "cache", "the", "of", "caroline", "went", "ticket"]
QUESTIONS = ["when did caroline go to the support group", "alpha beta", "deploy failed",
             "ticket", "the cache of the build"]


@pytest.fixture(autouse=True)
def small_index(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wordindex, "MIN_ROWS", 0)
    monkeypatch.setattr(wordindex, "SEGMENT", 2)


def archive(path: Path) -> SQLiteStore:
    rng = random.Random(3)
    store = SQLiteStore(str(path))
    session = store.create_session()
    store.append_messages(session.id, [
        {"role": "user", "content": " ".join(rng.choices(WORDS, k=rng.randint(1, 30)))}
        for _ in range(4 * wordindex.CHUNK + 500)])
    assert store.seal_word_index() == 4  # two segments merged
    return store


def answers(store: SQLiteStore, indexed: bool = True) -> list[list[tuple[str, int, float]]]:
    found = [[(h.session_id, h.seq, h.score) for h in store.search(SearchQuery(q, limit=30))]
             for q in QUESTIONS]
    if indexed:  # (the word index answered, not FTS5 in its place)
        with store.db.read() as conn:
            assert wordindex.gather(conn, [("ticket", "ticket")],
                                    indexer.watermark(conn)) is not None
    return found


def back_to_the_old_layout(path: Path) -> list[tuple[str, int, bytes, bytes, bytes]]:
    """The archive as migration 17 left it: the rows in ``word_postings``, no migration 18."""
    conn = sqlite3.connect(str(path), isolation_level=None)
    rows = conn.execute(
        f"SELECT t.term, b.id & {wordrows.CHUNK_MASK}, b.ids, b.tfs, b.lens FROM word_blobs b "
        f"JOIN word_terms t ON t.tid = b.id >> {wordrows.CHUNK_BITS} ORDER BY 1, 2").fetchall()
    conn.execute("BEGIN")
    conn.execute("DROP VIEW word_postings")  # (its triggers with it)
    nine = next(m for m in MIGRATIONS if m.version == 9)
    conn.execute(nine.statements[0])  # word_postings, as migration 9 made it
    conn.execute(nine.statements[1])
    conn.executemany("INSERT INTO word_postings VALUES (?, ?, ?, ?, ?)", rows)
    conn.execute("DROP TABLE word_blobs")
    conn.execute("DROP TABLE word_terms")
    conn.execute("DELETE FROM schema_migrations WHERE version = 18")
    conn.execute("COMMIT")
    conn.close()
    return rows


def test_an_archive_sealed_in_the_old_layout_is_carried_over_whole(tmp_path: Path) -> None:
    path = tmp_path / "refold.db"
    store = archive(path)
    before = answers(store)
    store.close()
    old_rows = back_to_the_old_layout(path)
    assert len(old_rows) > 20
    with SQLiteStore(str(path)) as store:  # migration 18 runs
        assert store.info()["schema_version"] == MIGRATIONS[-1].version
        with store.db.read() as conn:
            kinds = dict(conn.execute("SELECT name, type FROM sqlite_master"))
            assert kinds["word_postings"] == "view"  # (for a process of the older version)
            assert kinds["word_terms"] == kinds["word_blobs"] == "table"
            for term in {r[0] for r in old_rows}:
                assert wordrows.of_term(conn, term) == [
                    (c, i, f, n) for t, c, i, f, n in old_rows if t == term]
        assert answers(store) == before
        assert store.integrity_check() == []


def test_merges_and_changes_keep_each_terms_rows_in_chunk_order(tmp_path: Path) -> None:
    store = archive(tmp_path / "refold.db")
    reference = SQLiteStore(str(tmp_path / "refold.db"))
    with store.db.write() as conn:  # sealed rows rewritten and deleted: folded in
        conn.execute("UPDATE messages SET text = 'caroline caroline ticket' WHERE id = 10")
        conn.execute("DELETE FROM messages WHERE id = 5000")
    store.append_messages(store.list_sessions()[0].id, [
        {"role": "user", "content": "caroline went to the support group"}] * 4000)
    assert store.seal_word_index() >= 1
    with store.db.read() as conn:
        for term in ("carolin", "ticket", "the", "support"):
            chunks = [c for c, *_ in wordrows.of_term(conn, term)]
            assert chunks == sorted(set(chunks)) and chunks[0] == 0, (term, chunks)
    with pytest.MonkeyPatch.context() as patch:  # the same searches through FTS5 alone
        patch.setattr(wordindex, "MIN_ROWS", 10**9)
        want = answers(reference, indexed=False)
    assert answers(store) == want


def test_an_older_process_reads_and_writes_the_rows_through_the_old_name(
        tmp_path: Path) -> None:
    """A process of the previous version still running on the file after this one migrated it
    (a server, the command line upgraded first) issues its statements on ``word_postings``:
    the view carries them to the new rows, and the index stays exact."""
    path = tmp_path / "refold.db"
    store = archive(path)
    before = answers(store)
    old = sqlite3.connect(str(path), isolation_level=None)  # the statements the old code ran
    with store.db.read() as conn:
        for term in ("ticket", "carolin", "the"):
            assert old.execute("SELECT chunk, ids, tfs, lens FROM word_postings WHERE term = ? "
                               "ORDER BY chunk", (term,)).fetchall() == wordrows.of_term(conn,
                                                                                        term)
    # its merge: a segment's rows read, deleted and written back, in one transaction
    old.execute("BEGIN IMMEDIATE")
    rows = old.execute("SELECT term, chunk, ids, tfs, lens FROM word_postings "
                       "WHERE chunk >= ? AND chunk < ? ORDER BY term, chunk", (0, 2)).fetchall()
    assert len(rows) > 10
    old.execute("DELETE FROM word_postings WHERE chunk >= ? AND chunk < ?", (0, 2))
    assert not old.execute("SELECT count(*) FROM word_postings WHERE chunk < 2").fetchone()[0]
    old.executemany("INSERT INTO word_postings VALUES (?, ?, ?, ?, ?)", rows)
    old.execute("COMMIT")
    # its seal and rewrite: INSERT OR REPLACE of a term it holds keeps the term's other rows
    # (the term keeps its number) and replaces the one row
    ticket = old.execute("SELECT chunk, ids, tfs, lens FROM word_postings WHERE term = 'ticket'"
                         " ORDER BY chunk").fetchall()
    old.execute("INSERT OR REPLACE INTO word_postings VALUES (?, ?, ?, ?, ?)",
                ("ticket", *ticket[0]))
    old.execute("INSERT OR REPLACE INTO word_postings VALUES ('zzz', 2, x'0100', x'01', x'0200')")
    assert old.execute("SELECT chunk, ids, tfs, lens FROM word_postings WHERE term = 'ticket' "
                       "ORDER BY chunk").fetchall() == ticket
    with pytest.raises(sqlite3.IntegrityError):  # a plain INSERT of a row there: as the table
        old.execute("INSERT INTO word_postings VALUES (?, ?, ?, ?, ?)", ("ticket", *ticket[0]))
    assert old.execute("SELECT ids FROM word_postings WHERE term = 'zzz' AND chunk = 2"
                       ).fetchone() == (b"\x01\x00",)
    old.execute("DELETE FROM word_postings WHERE term = 'zzz' AND chunk = 2")
    assert old.execute("SELECT count(*) FROM word_postings WHERE term = 'zzz'").fetchone() == (0,)
    old.close()
    assert answers(store) == before
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(wordindex, "MIN_ROWS", 10**9)
        assert answers(store, indexed=False) == before
    assert store.integrity_check() == []
