"""Memory write and snapshot cost: file store and DB store (SQLite) against a raw baseline.

Baseline: one ``atomic_write`` of the same rendered file (temp file + fsync + rename) — the
floor any durable write pays. Each store write adds the lock, the reload, the scan and the
sidecar. Run: python bench/bench_memory_store.py [N]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from refold.memory import DBMemoryStore, open_file_store, take_snapshot
from refold.memory.entries import render_entries
from refold.memory.files import atomic_write
from refold.store.sqlite import SQLiteStore


def timed(label: str, count: int, fn: object, baseline: float | None = None) -> float:
    start = time.perf_counter()
    for i in range(count):
        fn(i)  # type: ignore[operator]
    per_op = (time.perf_counter() - start) * 1000 / count
    ratio = f" ({per_op / baseline:.1f}x baseline)" if baseline else ""
    print(f"{label:<38} {per_op:8.3f} ms/op{ratio}")
    return per_op


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    notes = [f"note {i}: the build uses pnpm and runs on node 20" for i in range(count)]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        raw = root / "raw.md"
        base = timed("baseline: atomic_write of the file", count,
                     lambda i: atomic_write(raw, render_entries(notes[: i + 1]).encode()))
        files = open_file_store(root / "memories", limits={"memory": 10**6})
        timed("file store: add", count, lambda i: files.add("memory", notes[i]), base)
        timed("file store: replace", count,
              lambda i: files.replace("memory", f"note {i}:", f"note {i}: edited"), base)
        timed("file store: snapshot", count, lambda i: take_snapshot(files), base)
        sqlite = SQLiteStore(str(root / "refold.db"))
        db = DBMemoryStore(sqlite, limits={"memory": 10**6})
        timed("db store (SQLite): add", count, lambda i: db.add("memory", notes[i]), base)
        timed("db store (SQLite): snapshot", count, lambda i: take_snapshot(db), base)
        sqlite.close()


if __name__ == "__main__":
    main()
