"""SQLite: WAL checkpoints run on a background thread (``Checkpointer``), not inside commits.

Whether the WAL was checkpointed is read from the main database file alone: a copy of it made
without the ``-wal`` file holds exactly the pages already copied back by a checkpoint. Waits
poll with a deadline (never a fixed sleep) and assert nothing about timing.
"""

from __future__ import annotations

import shutil
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from refold.store.sqlite import SQLiteStore
from refold.store.sqlite.database import BACKSTOP_PAGES, CHECKPOINT_COMMITS, Checkpointer

DEADLINE = 30.0  # generous: only a broken checkpointer gets near it


def wait_for(condition: Callable[[], bool], what: str) -> None:
    end = time.monotonic() + DEADLINE
    while not condition():
        if time.monotonic() > end:
            pytest.fail(f"not within {DEADLINE:.0f}s: {what}")
        time.sleep(0.02)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def rows_in_main_file(path: Path, tmp: Path) -> int | None:
    """Message rows visible in the database file on its own (no WAL), None if unreadable."""
    copy = tmp / f"copy-{time.monotonic_ns()}.db"
    shutil.copyfile(path, copy)
    try:
        conn = sqlite3.connect(copy)
        try:
            return int(conn.execute("SELECT count(*) FROM messages").fetchone()[0])
        finally:
            conn.close()
    except sqlite3.DatabaseError:  # caught mid-checkpoint (a torn copy): try again
        return None


def migrated(path: Path) -> SQLiteStore:
    """A store on a file whose schema is already in the main file (the last close of the first
    store checkpointed it), so the file alone is always readable."""
    SQLiteStore(str(path)).close()
    return SQLiteStore(str(path))


def checkpointer_of(store: SQLiteStore) -> Checkpointer:
    cp = store.db.checkpointer
    assert cp is not None
    return cp


def thread_of(cp: Checkpointer) -> threading.Thread | None:
    return cp._thread


def test_commits_are_checkpointed_in_the_background(tmp_path: Path) -> None:
    path = tmp_path / "refold.db"
    store = migrated(path)
    try:
        cp = checkpointer_of(store)
        s = store.create_session()
        for i in range(50):
            store.append_messages(s.id, [user(f"m{i}")])
        wait_for(lambda: cp.runs > 0, "a background checkpoint ran")
        # every commit reaches the main file, with no further write to trigger SQLite's own
        # checkpoint (the backstop is far above these few pages)
        wait_for(lambda: rows_in_main_file(path, tmp_path) == 50,
                 "all 50 rows were checkpointed into the database file")
        thread = thread_of(cp)
        assert thread is not None and thread.is_alive() and thread.daemon
    finally:
        store.close()


def test_without_the_thread_the_wal_is_not_checkpointed(tmp_path: Path) -> None:
    """The control for the check above: with the checkpointer stopped before any write the rows
    stay in the WAL (the main file alone does not have them), and no thread starts."""
    path = tmp_path / "refold.db"
    store = migrated(path)
    try:
        cp = checkpointer_of(store)
        cp.stop()
        s = store.create_session()
        for i in range(50):
            store.append_messages(s.id, [user(f"m{i}")])
        assert thread_of(cp) is None and cp.runs == 0
        assert rows_in_main_file(path, tmp_path) == 0
        assert len(store.get_messages(s.id)) == 50  # readable through the WAL all the same
    finally:
        store.close()
    # the last connection to close checkpoints everything
    reopened = SQLiteStore(str(path))
    try:
        assert reopened.integrity_check() == []
        assert len(reopened.get_messages(s.id)) == 50
    finally:
        reopened.close()


def test_many_commits_wake_the_thread(tmp_path: Path) -> None:
    path = tmp_path / "refold.db"
    store = migrated(path)
    try:
        cp = checkpointer_of(store)
        s = store.create_session()
        for i in range(CHECKPOINT_COMMITS * 2 + 10):
            store.append_messages(s.id, [user(f"m{i}")])
        total = CHECKPOINT_COMMITS * 2 + 10
        wait_for(lambda: rows_in_main_file(path, tmp_path) == total,
                 f"all {total} rows were checkpointed into the database file")
        assert cp.runs > 0
    finally:
        store.close()


def test_close_stops_the_thread(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "refold.db"))
    cp = checkpointer_of(store)
    store.append_messages(store.create_session().id, [user("a")])
    thread = thread_of(cp)
    assert thread is not None and thread.is_alive()
    assert thread.name == "refold-sqlite-checkpoint"
    store.close()
    assert not thread.is_alive()  # joined by close()
    store.close()  # a second close is harmless
    assert not thread.is_alive()


def test_a_store_that_never_writes_starts_no_thread(tmp_path: Path) -> None:
    path = tmp_path / "refold.db"
    SQLiteStore(str(path)).close()  # create and migrate the file
    before = {t for t in threading.enumerate() if t.name == "refold-sqlite-checkpoint"}
    store = SQLiteStore(str(path))
    try:
        cp = checkpointer_of(store)
        assert store.list_sessions() == []
        assert store.info()["schema_version"] >= 1
        assert thread_of(cp) is None and cp.runs == 0
        # a fresh file too: migration writes on the writer connection, not through write()
        fresh = SQLiteStore(str(tmp_path / "fresh.db"))
        try:
            assert thread_of(checkpointer_of(fresh)) is None
        finally:
            fresh.close()
        after = {t for t in threading.enumerate() if t.name == "refold-sqlite-checkpoint"}
        assert after <= before
    finally:
        store.close()
    assert thread_of(cp) is None


def test_a_write_after_close_starts_no_thread(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "refold.db"))
    cp = checkpointer_of(store)
    store.close()
    with pytest.raises(Exception, match="closed"):
        store.create_session()
    cp.wrote()  # even called directly: stopped means stopped
    assert thread_of(cp) is None


def test_memory_store_has_no_checkpointer() -> None:
    store = SQLiteStore(":memory:")
    try:
        assert store.journal_mode == "memory"
        assert store.db.checkpointer is None
        s = store.create_session()
        store.append_messages(s.id, [user("a")])  # commits do not need one
        assert len(store.get_messages(s.id)) == 1
    finally:
        store.close()


def test_the_writer_keeps_sqlites_checkpoint_as_a_backstop(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "refold.db"))
    try:
        assert store.journal_mode == "wal"
        pages = store.db.conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0]
        assert pages == BACKSTOP_PAGES
        assert BACKSTOP_PAGES > 1000  # raised from SQLite's default, not switched off
    finally:
        store.close()


def test_everything_written_survives_close_and_reopen(tmp_path: Path) -> None:
    """Writers on several threads, readers alongside, the checkpointer running: after close
    and reopen every row is there and the database is intact."""
    path = str(tmp_path / "refold.db")
    store = SQLiteStore(path)
    sessions = [store.create_session().id for _ in range(3)]
    errors: list[BaseException] = []
    per_writer = 150

    def write(session_id: str) -> None:
        try:
            for i in range(per_writer):
                store.append_messages(session_id, [user(f"{session_id} {i}")])
        except BaseException as exc:  # reported below
            errors.append(exc)

    def read() -> None:
        try:
            for _ in range(100):
                for session_id in sessions:
                    store.get_messages(session_id)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(s,)) for s in sessions]
    threads.append(threading.Thread(target=read))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    cp = checkpointer_of(store)
    wait_for(lambda: cp.runs > 0, "a background checkpoint ran")
    store.close()
    assert thread_of(cp) is not None and not thread_of(cp).is_alive()  # type: ignore[union-attr]
    reopened = SQLiteStore(path)
    try:
        assert reopened.integrity_check() == []
        for session_id in sessions:
            got = [m.message["content"] for m in reopened.get_messages(session_id)]
            assert got == [f"{session_id} {i}" for i in range(per_writer)]
            assert reopened.get_session(session_id).message_count == per_writer
    finally:
        reopened.close()



def wal_restarts(path: Path) -> int:
    """The WAL header's salt-1: SQLite adds one to it each time the log starts over."""
    with open(f"{path}-wal", "rb") as wal:
        return int.from_bytes(wal.read(20)[16:20], "big")



def test_the_log_starts_over_although_the_first_pass_left_frames_behind(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a steady load a commit lands during nearly every background pass, so one pass
    never left the log complete and the WAL never restarted: it grew without end and every
    commit extended the file. Each run now ends with a short second pass under the writer
    lock. Here a reader's snapshot keeps the first pass from copying the last frames, as such
    a commit would, and ends before the second."""
    path = tmp_path / "refold.db"
    store = migrated(path)
    reader = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        cp = checkpointer_of(store)
        s = store.create_session()
        for i in range(20):
            store.append_messages(s.id, [user(f"m{i}")])
        wait_for(lambda: cp.runs > 0, "a background checkpoint ran")
        finish = cp._finish
        finished = threading.Event()

        def the_read_ends_between_the_passes(conn: sqlite3.Connection) -> None:
            if reader.in_transaction:
                reader.execute("COMMIT")
            finish(conn)
            finished.set()

        monkeypatch.setattr(cp, "_finish", the_read_ends_between_the_passes)
        reader.execute("BEGIN")
        assert reader.execute("SELECT count(*) FROM messages").fetchone() == (20,)
        for i in range(5):
            store.append_messages(s.id, [user(f"during the read {i}")])
        wait_for(finished.is_set, "a run with its second pass")
        before = wal_restarts(path)
        store.append_messages(s.id, [user("this write starts the log over")])
        assert wal_restarts(path) == before + 1
        assert len(store.get_messages(s.id)) == 26
    finally:
        reader.close()
        store.close()


def test_a_long_write_transaction_postpones_the_second_pass_without_stalling_the_thread(
        tmp_path: Path) -> None:
    path = tmp_path / "refold.db"
    store = migrated(path)
    try:
        cp = checkpointer_of(store)
        s = store.create_session()
        store.append_messages(s.id, [user("before the long transaction")])
        runs = cp.runs
        with store.db.write() as conn:  # holds the writer lock all along
            conn.execute("UPDATE sessions SET title = 'long' WHERE id = ?", (s.id,))
            wait_for(lambda: cp.runs > runs, "a run that gave up waiting for the writer lock")
        store.append_messages(s.id, [user("after it")])
        assert [m.message["content"] for m in store.get_messages(s.id)] == [
            "before the long transaction", "after it"]
        assert store.get_session(s.id).title == "long"
    finally:
        store.close()
