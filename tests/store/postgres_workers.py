"""Process entry points for the PostgreSQL multi-process tests (importable by spawned children).

Each worker opens its own ``PostgresStore`` on the shared schema, so the processes meet only in
the database, as gateway hosts would.
"""

from __future__ import annotations

import time
from typing import Any


def _wait_until(start_at: float) -> None:
    """Line the processes up so they really overlap (spawned children start staggered)."""
    delay = start_at - time.time()
    if delay > 0:
        time.sleep(delay)


def _open(url: str, schema: str) -> Any:
    from refold.store.postgres import PostgresStore

    return PostgresStore(url, schema=schema, min_size=1, max_size=2)


def sync_growing_history(url: str, schema: str, session_id: str, history: list[dict[str, Any]],
                         rounds: int, start_at: float) -> int:
    """Re-send ever longer prefixes of one history, like a proxy client; returns rows appended."""
    store = _open(url, schema)
    _wait_until(start_at)
    appended = 0
    try:
        for _ in range(rounds):
            for end in range(1, len(history) + 1):
                appended += len(store.sync_messages(session_id, history[:end]).appended)
    finally:
        store.close()
    return appended


def append_own_messages(url: str, schema: str, session_id: str, worker: int, count: int,
                        start_at: float) -> int:
    store = _open(url, schema)
    _wait_until(start_at)
    try:
        for i in range(count):
            store.append_messages(session_id, [{"role": "user", "content": f"w{worker} m{i}"}])
    finally:
        store.close()
    return count


def open_store(url: str, schema: str, start_at: float = 0.0) -> list[int]:
    """Open (and so migrate) the schema; returns the migration versions this process applied."""
    _wait_until(start_at)
    store = _open(url, schema)
    try:
        return list(store.applied_migrations)
    finally:
        store.close()


def try_lease(url: str, schema: str, name: str, holder: str, start_at: float,
              tried_dir: str = "", processes: int = 0) -> bool:
    """Try to take ``name``, then keep the store (so a lease taken) open until all
    ``processes`` have tried (each leaves a file in ``tried_dir``): a lease lapses with the
    connection that took it."""
    import os

    store = _open(url, schema)
    _wait_until(start_at)
    try:
        got = bool(store.acquire_lease(name, holder, 60.0))
        if tried_dir:
            open(os.path.join(tried_dir, holder), "w").close()
            deadline = time.time() + 60
            while len(os.listdir(tried_dir)) < processes and time.time() < deadline:
                time.sleep(0.05)
        return got
    finally:
        store.close()


def hold_session_lock(url: str, schema: str, session_id: str, ready_path: str) -> None:
    """Take a writer's lock on the session, write a row inside the open transaction, then hang
    (the test SIGKILLs this process mid-transaction)."""
    import psycopg

    conn = psycopg.connect(url)
    conn.execute(f'SET search_path TO "{schema}", public')
    conn.execute("SELECT 1 FROM sessions WHERE id = %s FOR NO KEY UPDATE", (session_id,))
    conn.execute("INSERT INTO messages (session_id, seq, role, body, identity, created_at, "
                 "search_text) VALUES (%s, 99, 'user', '{}', 'half-written', 0, '')",
                 (session_id,))
    with open(ready_path, "w") as fh:
        fh.write("locked")
    time.sleep(600)
