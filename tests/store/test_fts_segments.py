"""The FTS5 indexes' segments are merged off the write path (``indexer.merge_segments``): a
cold question probes each segment once a term, so fewer segments read fewer pages. Merging
changes no search result, leaves every index intact, and never fails a search."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest

from refold.errors import StorageError
from refold.store.base import SearchQuery
from refold.store.sqlite import indexer, wordindex
from refold.store.sqlite.store import SQLiteStore

WORDS = ["deploy", "cache", "build", "failed", "server", "running", "files", "group", "support",
         "the", "of", "a", "to"]
CJK = ["部署", "失败", "服务器", "缓存", "我们", "什么", "时候", "出", "向", "门"]
QUESTIONS = ["when did the deploy fail", "cache server files", "我们什么时候部署了服务器吗？",
             "缓存失败", "出门", "向", "build group support running"]


def segments(conn: sqlite3.Connection, table: str) -> int:
    """How many segments ``table`` holds: every segment has rows in its ``_idx`` table."""
    return int(conn.execute(f"SELECT count(DISTINCT segid) FROM {table}_idx").fetchone()[0])


def fill(store: SQLiteStore, batches: int, seed: int = 3) -> None:
    """``batches`` appends of 250 rows: each is indexed in its own commit (``INLINE_ROWS``),
    flushing one segment an index, as a live archive's batches do."""
    rng = random.Random(seed)
    for _ in range(batches):
        session = store.create_session()
        store.append_messages(session.id, [
            {"role": "user", "content": " ".join(
                rng.choice(WORDS if rng.random() < 0.6 else CJK) for _ in range(rng.randint(2, 30)))}
            for _ in range(250)])


def answers(store: SQLiteStore) -> list[list[tuple[int | None, float | None]]]:
    return [[(h.message_id, h.score) for h in store.search(SearchQuery(q, limit=30))]
            for q in QUESTIONS]


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SQLiteStore:
    monkeypatch.setattr(wordindex, "MIN_ROWS", 0)  # chunks seal at this size too
    return SQLiteStore(str(tmp_path / "refold.db"))


def test_refold_index_leaves_few_segments_and_the_same_answers(store: SQLiteStore,
                                                               tmp_path: Path) -> None:
    fill(store, 40)
    with store.db.read() as conn:
        before = {t: segments(conn, t) for t in indexer.FTS_TABLES}
    assert max(before.values()) >= 5, before  # automerge (4 a level) left several
    # the same archive, without merging, answers the questions for reference
    reference = SQLiteStore(str(tmp_path / "copy.db"))
    fill(reference, 40)
    want = answers(reference)
    assert sum(map(len, want)) > 100

    store.seal_word_index()  # what `refold index` runs

    with store.db.write() as conn:
        after = {t: segments(conn, t) for t in indexer.FTS_TABLES}
        for table in indexer.FTS_TABLES:
            conn.execute(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")
            # automerge is the write path's and stays FTS5's four
            assert conn.execute(f"SELECT v FROM {table}_config WHERE k = 'automerge'"
                                ).fetchone() is None
    assert all(after[t] <= 2 and after[t] < before[t] for t in indexer.FTS_TABLES), \
        (before, after)
    assert answers(store) == want
    with store.db.write() as conn:  # nothing left to do: a step reports no work
        assert not any(indexer.merge_segments(conn, t) for t in indexer.FTS_TABLES)


def test_a_search_that_seals_a_chunk_merges_a_step(store: SQLiteStore) -> None:
    fill(store, 40)
    with store.db.read() as conn:
        before = sum(segments(conn, t) for t in indexer.FTS_TABLES)
    store.search(SearchQuery("deploy"))  # seals one chunk (catch_up_index), then merges
    with store.db.read() as conn:
        assert wordindex.state(conn)[0] == 1
        after = sum(segments(conn, t) for t in indexer.FTS_TABLES)
    assert after < before


def test_a_merge_that_meets_a_busy_database_fails_no_search(
        store: SQLiteStore, monkeypatch: pytest.MonkeyPatch) -> None:
    fill(store, 20)

    def busy(conn: sqlite3.Connection, table: str, pages: int = 0) -> bool:
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(indexer, "merge_segments", busy)
    hits = store.search(SearchQuery("deploy cache"))
    assert hits
    with store.db.read() as conn:
        assert wordindex.state(conn)[0] == 1  # the chunk was sealed all the same
    with pytest.raises(StorageError, match="locked"):  # `refold index` says so
        store.seal_word_index()
