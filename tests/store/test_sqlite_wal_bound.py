"""The serve database's WAL stays bounded: a long reader lets it grow, and once the reader is
gone the background checkpointer truncates it back under the limit (at the latest when the
writes pause; without the fix the file keeps its high-water size, 66 MB here, for ever)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from refold.store.sqlite import SQLiteStore

LIMIT = 256 * 1024


def _wal(path: Path) -> int:
    try:
        return os.path.getsize(str(path) + "-wal")
    except OSError:
        return 0


def _turn(store: SQLiteStore, session_id: str, i: int) -> None:
    body = f"turn {i}: " + " ".join(f"word{(i * 7 + j) % 997}" for j in range(400))
    store.append_messages(session_id, [{"role": "user", "content": body},
                                       {"role": "assistant", "content": body[::-1]}])


def test_the_wal_is_truncated_back_after_a_long_reader(tmp_path: Path) -> None:
    path = tmp_path / "serve.db"
    store = SQLiteStore(str(path), synchronous="NORMAL", wal_limit_bytes=LIMIT)
    try:
        session = store.create_session(title="load")
        release = threading.Event()
        holding = threading.Event()

        def long_reader() -> None:  # an export or a slow search holding one snapshot
            with store.db.read() as conn:
                conn.execute("SELECT count(*) FROM messages").fetchone()
                holding.set()
                release.wait(30)

        reader = threading.Thread(target=long_reader)
        reader.start()
        holding.wait(10)
        for i in range(150):
            _turn(store, session.id, i)
        grown = _wal(path)
        release.set()
        reader.join()
        sizes = []
        for i in range(150, 600):  # many more turns with ordinary short reads in between
            _turn(store, session.id, i)
            if i % 10 == 0:
                store.get_messages(session.id, limit=5)
                sizes.append(_wal(path))
        deadline = time.monotonic() + 10
        while _wal(path) > LIMIT and time.monotonic() < deadline:
            time.sleep(0.1)
        final = _wal(path)
        checkpointer = store.db.checkpointer
        assert checkpointer is not None
        assert grown > 4 * LIMIT, grown  # the reader really held the WAL
        # once the writes pause the file is back under the limit (under continuous write
        # pressure on a loaded machine the truncation can wait for that pause)
        assert final <= LIMIT, (final, sizes[-5:])
        assert checkpointer.truncations >= 1
        assert len(store.get_messages(session.id)) == 1200  # nothing lost
    finally:
        store.close()
