"""Worker processes for the SQLite reliability tests (importable, so ``spawn`` can run them)."""

from __future__ import annotations

import sys
from typing import Any

from refold.store.sqlite import SQLiteStore


def turn(i: int) -> dict[str, Any]:
    return {"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} 轮次"}


def sync_and_append(path: str, shared_id: str, worker: int, turns: int) -> None:
    """Sync a growing shared history (like a proxy) and append to an own session."""
    store = SQLiteStore(path, synchronous="NORMAL")
    own = store.create_session(session_id=f"own-{worker}")
    history = [turn(i) for i in range(turns)]
    for n in range(1, turns + 1):
        store.sync_messages(shared_id, history[:n])
        store.append_messages(own.id, [{"role": "user", "content": f"w{worker} m{n}"}])
    store.close()


def acking_writer(path: str, session_id: str, ack_path: str, batch: int) -> None:
    """Append batches forever; after each commit, acknowledge its seqs in ``ack_path``."""
    store = SQLiteStore(path)  # synchronous=FULL: acknowledged means durable
    with open(ack_path, "a", encoding="utf-8") as ack:
        i = 0
        while True:
            result = store.append_messages(
                session_id, [{"role": "user", "content": f"msg {i + k}"} for k in range(batch)])
            ack.write(" ".join(str(m.seq) for m in result.appended) + "\n")
            ack.flush()
            i += batch


if __name__ == "__main__":  # pragma: no cover - manual use
    acking_writer(*sys.argv[1:4], int(sys.argv[4]))


def open_at(path: str, start: float) -> str:
    """Open (and so create) the store at ``path`` at wall time ``start``; "" or the error."""
    import time

    time.sleep(max(0.0, start - time.time()))
    try:
        SQLiteStore(path).close()
    except Exception as exc:  # reported to the test, which names it
        return f"{type(exc).__name__}: {exc}"
    return ""
