"""``Database.nonblocking()``: within it (this thread) a call that would wait — the writer lock
held by another thread, the database locked by another connection, every reader in use —
raises ``WouldBlock`` at once, having changed nothing; outside it the same calls wait.

Real SQLite files; the other writers are real threads and a real second connection.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from refold.errors import StorageError, WouldBlock
from refold.store.sqlite import SQLiteStore
from refold.store.sqlite.database import MAX_READERS, Database

BUSY_MS = 60_000  # long: a call that waited on another connection would trip the hang guard
HANG_GUARD = 5.0


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = Database(str(tmp_path / "nb.db"), synchronous="NORMAL", busy_timeout_ms=BUSY_MS)
    with database.write() as conn:
        conn.execute("CREATE TABLE t (x INTEGER)")
    yield database
    database.close()


def rows(db: Database) -> list[int]:
    with db.read() as conn:
        return [r[0] for r in conn.execute("SELECT x FROM t ORDER BY x")]


def insert(db: Database, value: int) -> None:
    with db.write() as conn:
        conn.execute("INSERT INTO t VALUES (?)", (value,))


def in_thread(call: Callable[[], Any]) -> Any:
    """``call()`` on a fresh thread (its own nonblocking state), with a hang guard."""
    out: list[Any] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            out.append(call())
        except BaseException as exc:  # re-raised in the test thread
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(HANG_GUARD)
    assert not thread.is_alive(), "the call waited"
    if errors:
        raise errors[0]
    return out[0] if out else None


class Holder:
    """Another thread inside ``enter()`` until released (``release_after`` or on exit)."""

    def __init__(self, enter: Callable[[], Any], on_enter: Callable[[Any], None] | None = None
                 ) -> None:
        self._enter = enter
        self._on_enter = on_enter
        self.held = threading.Event()
        self.go = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with self._enter() as value:
            if self._on_enter is not None:
                self._on_enter(value)
            self.held.set()
            self.go.wait(30)

    def __enter__(self) -> Holder:
        self.thread.start()
        assert self.held.wait(HANG_GUARD)
        return self

    def release_after(self, seconds: float) -> None:
        threading.Timer(seconds, self.go.set).start()

    def __exit__(self, *exc: object) -> None:
        self.go.set()
        self.thread.join(HANG_GUARD)
        assert not self.thread.is_alive()


def nonblocking_insert(db: Database, value: int, ran: list[bool]) -> None:
    with db.nonblocking(), db.write() as conn:
        ran.append(True)
        conn.execute("INSERT INTO t VALUES (?)", (value,))


def test_writer_lock_held_by_another_thread(db: Database) -> None:
    ran: list[bool] = []
    with Holder(db.write, lambda conn: conn.execute("INSERT INTO t VALUES (1)")):
        with pytest.raises(WouldBlock):
            in_thread(lambda: nonblocking_insert(db, 2, ran))
        assert issubclass(WouldBlock, StorageError)
    assert ran == []
    assert rows(db) == [1]  # the holder's write only
    insert(db, 3)  # the lock was released by the failed call: writes go on
    assert rows(db) == [1, 3]


def test_writer_lock_held_by_another_thread_waits_outside_nonblocking(db: Database) -> None:
    with Holder(db.write, lambda conn: conn.execute("INSERT INTO t VALUES (1)")) as holder:
        holder.release_after(0.2)
        in_thread(lambda: insert(db, 2))  # waits for the holder, then writes
    assert rows(db) == [1, 2]


def blocking_write_waits_for_another_connection(db: Database, value: int) -> None:
    """Another connection holds the write lock for a moment: a write outside ``nonblocking``
    waits for it (the busy timeout applies again after non-blocking writes) and lands."""
    other = sqlite3.connect(db.path, isolation_level=None, check_same_thread=False)
    try:
        other.execute("BEGIN IMMEDIATE")
        timer = threading.Timer(0.2, lambda: other.execute("ROLLBACK"))
        timer.start()
        in_thread(lambda: insert(db, value))  # "database is locked" if it did not wait
        timer.join()
    finally:
        other.close()


def test_another_connection_in_begin_immediate(db: Database) -> None:
    other = sqlite3.connect(db.path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        other.execute("INSERT INTO t VALUES (1)")
        ran: list[bool] = []
        with pytest.raises(WouldBlock):
            in_thread(lambda: nonblocking_insert(db, 2, ran))
        assert ran == []
        assert not db.conn.in_transaction
        other.execute("ROLLBACK")
    finally:
        other.close()
    assert rows(db) == []
    blocking_write_waits_for_another_connection(db, 4)
    in_thread(lambda: nonblocking_insert(db, 3, []))  # free again: nonblocking writes work
    assert rows(db) == [3, 4]
    blocking_write_waits_for_another_connection(db, 5)
    assert rows(db) == [3, 4, 5]


def test_another_connection_in_begin_immediate_waits_outside_nonblocking(db: Database) -> None:
    other = sqlite3.connect(db.path, isolation_level=None, check_same_thread=False)
    try:
        other.execute("BEGIN IMMEDIATE")
        other.execute("INSERT INTO t VALUES (1)")
        threading.Timer(0.2, lambda: other.execute("COMMIT")).start()
        in_thread(lambda: insert(db, 2))  # the busy timeout waits for the commit
    finally:
        other.close()
    assert rows(db) == [1, 2]


def test_all_readers_taken(db: Database) -> None:
    holders = [Holder(db.read) for _ in range(MAX_READERS)]
    for holder in holders:
        holder.__enter__()
    try:
        assert len(db._readers) == MAX_READERS and not db._idle

        def nonblocking_read() -> list[int]:
            with db.nonblocking():
                return rows(db)

        with pytest.raises(WouldBlock):
            in_thread(nonblocking_read)
        assert len(db._readers) == MAX_READERS  # no extra connection was opened
        # outside nonblocking: waits for a reader to come back
        holders[0].release_after(0.2)
        insert(db, 5)  # writes do not need a reader
        assert in_thread(lambda: rows(db)) == [5]
    finally:
        for holder in holders:
            holder.__exit__()
    assert in_thread(nonblocking_read) == [5]  # readers idle again


def test_nesting_restores_the_outer_mode(db: Database) -> None:
    def probe() -> bool:
        """True when a write would raise WouldBlock here (the lock is held elsewhere)."""
        try:
            with db.write():
                return False
        except WouldBlock:
            return True

    with Holder(db.write) as holder:
        def nested() -> list[bool]:
            seen = []
            with db.nonblocking():
                seen.append(probe())
                with db.nonblocking():
                    seen.append(probe())
                seen.append(probe())  # still nonblocking after the inner one ended
            return seen

        assert in_thread(nested) == [True, True, True]
        holder.release_after(0.2)
        assert in_thread(probe) is False  # outside: waited for the holder
    # per thread: another thread's nonblocking() does not change this one
    entered, leave = threading.Event(), threading.Event()

    def stay_nonblocking() -> None:
        with db.nonblocking():
            entered.set()
            leave.wait(HANG_GUARD)

    other = threading.Thread(target=stay_nonblocking, daemon=True)
    other.start()
    assert entered.wait(HANG_GUARD)
    try:
        with Holder(db.write) as holder:
            holder.release_after(0.2)
            assert probe() is False  # this thread waits
    finally:
        leave.set()
        other.join(HANG_GUARD)


def test_nested_write_in_nonblocking_joins_the_outer_transaction(db: Database) -> None:
    with db.nonblocking(), db.write() as outer:
        outer.execute("INSERT INTO t VALUES (1)")
        with db.write() as inner:  # same thread: the re-entrant lock, the same transaction
            inner.execute("INSERT INTO t VALUES (2)")
        with db.read() as conn:  # the writer reads its own transaction
            assert [r[0] for r in conn.execute("SELECT x FROM t ORDER BY x")] == [1, 2]
    assert rows(db) == [1, 2]


def test_memory_database_lock_held(tmp_path: Path) -> None:
    store = SQLiteStore(":memory:")
    try:
        assert store.commits_are_quick
        with Holder(lambda: store.db._lock):
            def nonblocking_count() -> int:
                with store.nonblocking(), store.db.read() as conn:
                    return int(conn.execute("SELECT count(*) FROM sessions").fetchone()[0])

            with pytest.raises(WouldBlock):
                in_thread(nonblocking_count)
        assert in_thread(nonblocking_count) == 0
    finally:
        store.close()


@pytest.mark.parametrize(("synchronous", "quick"), [
    ("NORMAL", True), ("OFF", True), ("FULL", False), ("EXTRA", False)])
def test_commits_are_quick(tmp_path: Path, synchronous: Any, quick: bool) -> None:
    store = SQLiteStore(str(tmp_path / "q.db"), synchronous=synchronous)
    try:
        assert store.db.journal_mode == "wal"
        assert store.commits_are_quick is quick
    finally:
        store.close()


def test_store_calls_in_nonblocking_change_nothing_when_busy(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "s.db"), synchronous="NORMAL", busy_timeout_ms=BUSY_MS)
    try:
        session = store.create_session(title="t")
        store.append_messages(session.id, [{"role": "user", "content": "one"}])
        other = sqlite3.connect(store.path, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")

            def append() -> None:
                with store.nonblocking():
                    store.append_messages(session.id, [{"role": "assistant", "content": "x"}])

            with pytest.raises(WouldBlock):
                in_thread(append)
            other.execute("ROLLBACK")
        finally:
            other.close()
        assert [m.message["content"] for m in store.get_messages(session.id)] == ["one"]
        assert store.get_session(session.id).message_count == 1
    finally:
        store.close()
