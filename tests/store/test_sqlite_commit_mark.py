"""``Database.last_commit_mark`` / ``unchanged_since``: "has anything been committed since my
last commit?" answered with one PRAGMA instead of a read. It must say "changed" for a commit by
another connection (another process), for a write on the same connection from another thread
(another runtime of this process), and for an uncommitted or rolled-back write; "unchanged"
only when nothing was written at all. A mark is per thread.

Real SQLite files; the other process is played by a second ``sqlite3`` connection.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from refold.errors import WouldBlock
from refold.store.sqlite import SQLiteStore
from refold.store.sqlite.database import Database


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = Database(str(tmp_path / "mark.db"), synchronous="NORMAL", busy_timeout_ms=2000)
    with database.write() as conn:
        conn.execute("CREATE TABLE t (x INTEGER)")
    yield database
    database.close()


def insert(db: Database, value: int) -> None:
    with db.write() as conn:
        conn.execute("INSERT INTO t VALUES (?)", (value,))


def test_unchanged_after_our_own_commit_and_reads(db: Database) -> None:
    insert(db, 1)
    mark = db.last_commit_mark()
    assert mark is not None and db.unchanged_since(mark)
    with db.read() as conn:
        conn.execute("SELECT count(*) FROM t").fetchone()
    assert db.unchanged_since(mark)  # reading changes nothing


def test_a_commit_by_another_connection_changes_it(db: Database) -> None:
    insert(db, 1)
    mark = db.last_commit_mark()
    other = sqlite3.connect(db.path, isolation_level=None)
    try:
        other.execute("INSERT INTO t VALUES (2)")
    finally:
        other.close()
    assert not db.unchanged_since(mark)


def test_a_commit_mark_may_reuse_an_earlier_version_but_never_hides_a_commit(
        db: Database) -> None:
    """A commit's mark takes the data version this connection read last (one statement less
    per write): another process committing before our commit only makes the answer "changed"
    (conservative), one after it is always seen, and once a check has read the new version our
    next commit's mark is current again."""
    insert(db, 1)
    other = sqlite3.connect(db.path, isolation_level=None)
    try:
        other.execute("INSERT INTO t VALUES (2)")  # before our next commit
        insert(db, 3)
        mark = db.last_commit_mark()
        other.execute("INSERT INTO t VALUES (4)")  # after it: must be seen
        assert not db.unchanged_since(mark)
        insert(db, 5)  # the check above read the current version: this mark is exact
        mark = db.last_commit_mark()
        assert db.unchanged_since(mark)
        other.execute("INSERT INTO t VALUES (6)")
        assert not db.unchanged_since(mark)
    finally:
        other.close()


def test_a_write_from_another_thread_of_this_process_changes_it(db: Database) -> None:
    insert(db, 1)
    mark = db.last_commit_mark()
    worker = threading.Thread(target=insert, args=(db, 2))
    worker.start()
    worker.join()
    assert not db.unchanged_since(mark)
    assert db.last_commit_mark() == mark  # marks are per thread: ours is still our commit


def test_a_rolled_back_write_counts_as_a_change(db: Database) -> None:
    """Conservative: a statement that changed rows and was rolled back still moves it."""
    insert(db, 1)
    mark = db.last_commit_mark()
    with pytest.raises(RuntimeError), db.write() as conn:
        conn.execute("INSERT INTO t VALUES (2)")
        raise RuntimeError("abort")
    assert not db.unchanged_since(mark)


def test_no_mark_means_unknown_and_a_busy_writer_never_waits(db: Database) -> None:
    assert not db.unchanged_since(None)
    insert(db, 1)
    mark = db.last_commit_mark()
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with db.write():
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(10)
    try:
        with db.nonblocking(), pytest.raises(WouldBlock):
            db.unchanged_since(mark)
    finally:
        release.set()
        holder.join()


def test_the_store_passes_it_through(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "s.db"))
    try:
        session = store.create_session()
        store.append_messages(session.id, [{"role": "user", "content": "hi"}])
        mark = store.commit_mark()
        assert store.unchanged_since(mark)
        store.append_messages(session.id, [{"role": "user", "content": "again"}])
        assert not store.unchanged_since(mark)
    finally:
        store.close()
