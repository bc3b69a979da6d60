"""SQLite under stress: several processes at once, a writer killed with SIGKILL mid-append."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sqlite3
import time
from pathlib import Path

import pytest
import sqlite_workers  # tests/store is on sys.path (pytest rootdir-relative import)

from refold.errors import StorageError
from refold.messages.model import chain_identities
from refold.store.sqlite import SQLiteStore

CTX = multiprocessing.get_context("spawn")


def test_processes_syncing_and_appending_at_once(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.db")
    with SQLiteStore(path) as store:
        shared = store.create_session(session_id="shared")
    workers, turns = 4, 40
    procs = [CTX.Process(target=sqlite_workers.sync_and_append,
                         args=(path, shared.id, w, turns)) for w in range(workers)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
        assert proc.exitcode == 0
    with SQLiteStore(path) as store:
        history = [sqlite_workers.turn(i) for i in range(turns)]
        rows = store.get_messages(shared.id, include_inactive=True)
        # the same history synced by 4 processes: stored exactly once, nothing rewound
        assert [m.message for m in rows] == history
        assert [m.identity for m in rows] == chain_identities(history)
        assert [m.seq for m in rows] == list(range(1, turns + 1))
        for w in range(workers):
            own = store.get_messages(f"own-{w}")
            assert [m.message["content"] for m in own] == [f"w{w} m{n}"
                                                           for n in range(1, turns + 1)]
            assert [m.seq for m in own] == list(range(1, turns + 1))
        assert store.integrity_check() == []


def test_sigkill_mid_append_keeps_every_acknowledged_message(tmp_path: Path) -> None:
    path, ack = str(tmp_path / "kill.db"), tmp_path / "acks.txt"
    with SQLiteStore(path) as store:
        session = store.create_session()
    batch = 7
    proc = CTX.Process(target=sqlite_workers.acking_writer,
                       args=(path, session.id, str(ack), batch))
    proc.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if ack.exists() and ack.read_text().count("\n") >= 30:
            break
        time.sleep(0.02)
    assert proc.pid is not None
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(10)
    assert proc.exitcode == -signal.SIGKILL
    acked = [int(s) for line in ack.read_text().splitlines(keepends=True)
             if line.endswith("\n") for s in line.split()]
    assert len(acked) >= 30 * batch
    with SQLiteStore(path) as store:
        assert store.integrity_check() == []
        stored = [m.seq for m in store.get_messages(session.id)]
        assert set(acked) <= set(stored)
        # batches are atomic: a killed batch left nothing behind
        assert len(stored) % batch == 0
        assert stored == list(range(1, len(stored) + 1))
        assert store.get_session(session.id).message_count == len(stored)


def test_failed_batch_stores_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "fail.db")
    with SQLiteStore(path) as store:
        session = store.create_session()
        store.append_messages(session.id, [{"role": "user", "content": "before"}])
    raw = sqlite3.connect(path)
    raw.execute("CREATE TRIGGER boom BEFORE INSERT ON messages WHEN new.text = 'boom' "
                "BEGIN SELECT RAISE(ABORT, 'boom'); END")
    raw.commit()
    raw.close()
    batch = [{"role": "user", "content": t} for t in ("one", "two", "boom", "four")]
    with SQLiteStore(path) as store:
        with pytest.raises(StorageError):
            store.append_messages(session.id, batch)
        with pytest.raises(StorageError):
            store.sync_messages(session.id, [{"role": "user", "content": "before"}, *batch])
        assert [m.message["content"] for m in store.get_messages(session.id)] == ["before"]
        assert store.get_session(session.id).message_count == 1
        after = store.append_messages(session.id, [{"role": "user", "content": "after"}])
        assert after.appended[0].seq == 2


def test_importing_the_same_history_twice_leaves_the_same_rows(tmp_path: Path) -> None:
    path = str(tmp_path / "twice.db")
    history = [sqlite_workers.turn(i) for i in range(25)]
    with SQLiteStore(path) as store:
        session = store.create_session()
        first = store.sync_messages(session.id, history)
    with SQLiteStore(path) as store:
        second = store.sync_messages(session.id, history)
        rows = store.get_messages(session.id, include_inactive=True)
    assert (len(first.appended), first.skipped) == (25, 0)
    assert (second.appended, second.skipped, second.rewound) == ([], 25, 0)
    assert [m.message for m in rows] == history


def test_processes_opening_one_new_database_at_once_all_open_it(tmp_path: Path) -> None:
    """Two ``refold`` processes starting on a fresh home at the same moment: switching the new
    file to WAL answered "database is locked" at once in one of them (9 of 80 openings by two
    processes), without waiting for the busy timeout."""
    import time

    with CTX.Pool(4) as pool:
        for round_ in range(6):
            path = str(tmp_path / f"new-{round_}.db")
            start = time.time() + 0.5
            errors = pool.starmap(sqlite_workers.open_at, [(path, start)] * 4)
            assert errors == [""] * 4, errors
            store = SQLiteStore(path)
            assert store.db.journal_mode == "wal"
            store.close()
