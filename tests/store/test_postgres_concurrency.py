"""PostgreSQL under several processes: idempotent sync, serialized seq, one-time migrations."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import postgres_workers as workers
import pytest

pytestmark = pytest.mark.postgres

PROCESSES = 4


@pytest.fixture
def pg_schema(postgres_url: str) -> Iterator[str]:
    """A fresh schema name, dropped afterwards; the test's processes create it."""
    from refold.store.postgres import PostgresStore

    schema = f"t_{uuid.uuid4().hex[:12]}"
    yield schema
    store = PostgresStore(postgres_url, schema=schema)
    store.drop_schema()
    store.close()


def _pool() -> multiprocessing.pool.Pool:
    return multiprocessing.get_context("spawn").Pool(PROCESSES)


def _soon() -> float:
    """A start time every spawned worker reaches after importing refold and connecting."""
    return time.time() + 2.5


def test_concurrent_sync_of_one_history_stores_each_message_once(pg_schema: str,
                                                                postgres_url: str) -> None:
    from refold.store.postgres import PostgresStore

    store = PostgresStore(postgres_url, schema=pg_schema)
    try:
        session = store.create_session(title="proxy")
        history = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}"}
                   for i in range(12)]
        with _pool() as pool:
            results = pool.starmap(workers.sync_growing_history,
                                   [(postgres_url, pg_schema, session.id, history, 3,
                                     _soon())] * PROCESSES)
        stored = store.get_messages(session.id, include_inactive=True)
        assert sum(results) == len(history)
        assert [m.seq for m in stored] == list(range(1, len(history) + 1))
        assert [m.message for m in stored] == history
        assert all(m.active for m in stored)
        assert store.get_session(session.id).message_count == len(history)
    finally:
        store.close()


def test_concurrent_appends_get_strictly_increasing_seq(pg_schema: str,
                                                       postgres_url: str) -> None:
    from refold.store.postgres import PostgresStore

    store = PostgresStore(postgres_url, schema=pg_schema)
    try:
        session = store.create_session()
        per_worker = 25
        start = _soon()
        with _pool() as pool:
            pool.starmap(workers.append_own_messages,
                         [(postgres_url, pg_schema, session.id, w, per_worker, start)
                          for w in range(PROCESSES)])
        stored = store.get_messages(session.id)
        assert [m.seq for m in stored] == list(range(1, PROCESSES * per_worker + 1))
        contents = [m.message["content"] for m in stored]
        assert len(set(contents)) == len(contents) == PROCESSES * per_worker
        for w in range(PROCESSES):  # each worker's own messages keep their order
            mine = [c for c in contents if c.startswith(f"w{w} ")]
            assert mine == [f"w{w} m{i}" for i in range(per_worker)]
        assert store.integrity_check() == []
    finally:
        store.close()


def test_concurrent_open_applies_each_migration_once(pg_schema: str,
                                                    postgres_url: str) -> None:
    from refold.store.postgres.schema import LATEST_VERSION

    with _pool() as pool:
        applied = pool.starmap(workers.open_store,
                               [(postgres_url, pg_schema, _soon())] * PROCESSES)
    flat = sorted(v for versions in applied for v in versions)
    assert flat == list(range(1, LATEST_VERSION + 1))
    assert sum(1 for versions in applied if versions) == 1


def test_only_one_process_gets_a_lease(pg_schema: str, postgres_url: str,
                                       tmp_path: Path) -> None:
    workers.open_store(postgres_url, pg_schema)
    start = _soon()
    with _pool() as pool:
        got = pool.starmap(workers.try_lease, [(postgres_url, pg_schema, "compact:s1", f"h{i}",
                                                start, str(tmp_path), PROCESSES)
                                               for i in range(PROCESSES)])
    assert got.count(True) == 1


def test_a_writer_killed_mid_transaction_leaves_nothing_and_frees_the_session(
        pg_schema: str, tmp_path: Path, postgres_url: str) -> None:
    from refold.store.postgres import PostgresStore

    store = PostgresStore(postgres_url, schema=pg_schema)
    try:
        session = store.create_session()
        store.append_messages(session.id, [{"role": "user", "content": "before"}])
        ready = tmp_path / "ready"
        proc = multiprocessing.get_context("spawn").Process(
            target=workers.hold_session_lock,
            args=(postgres_url, pg_schema, session.id, str(ready)))
        proc.start()
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert proc.is_alive() and time.monotonic() < deadline, "the locker never started"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.join()
        # The server rolls the dead client's transaction back and drops its lock.
        result = store.append_messages(session.id, [{"role": "assistant", "content": "after"}])
        assert [m.seq for m in result.appended] == [2]
        assert [m.message["content"] for m in store.get_messages(session.id,
                                                                 include_inactive=True)] == [
            "before", "after"]
        assert store.integrity_check() == []
    finally:
        store.close()
