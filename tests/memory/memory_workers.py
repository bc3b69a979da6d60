"""Process entry points for the multi-process DB-backed memory tests (importable when spawned)."""

from __future__ import annotations

import time


def db_memory_worker(url: str, schema: str | None, worker: int, count: int,
                     start_at: float) -> None:
    """Add ``count`` entries, edit one and remove one, through a DBMemoryStore of its own."""
    from refold.memory import DBMemoryStore

    if schema is None:
        from refold.store import open_store

        store = open_store(url)
    else:
        from refold.store.postgres import PostgresStore

        store = PostgresStore(url, schema=schema, min_size=1, max_size=2)
    try:
        mem = DBMemoryStore(store, "shared")
        delay = start_at - time.time()
        if delay > 0:
            time.sleep(delay)
        for j in range(count):
            mem.add("memory", f"[w{worker}:{j}]")
        mem.replace("memory", f"[w{worker}:0]", f"[w{worker}:0] edited")
        mem.remove("memory", f"[w{worker}:1]")
    finally:
        store.close()
