"""One SQLite connection, its pragmas, its transactions, and the one place sqlite3 errors die.

Invariants:
- Every public store call runs inside ``read()`` or ``write()``; those hold a re-entrant lock, so
  the one connection is safe to share between threads (the proxy server uses threads).
- ``write()`` opens ``BEGIN IMMEDIATE``: the write lock is taken up front, so a read-then-write
  (sync's "what is stored already?") can never race another process. Nested ``write()`` calls
  join the outer transaction.
- A ``sqlite3.Error`` leaving ``read()``/``write()`` becomes a ``StorageError`` (refold errors
  pass through unchanged); a failed ``write()`` is rolled back completely.
- WAL is used where it can be; where the journal mode cannot become WAL (network filesystems,
  VFSes without shared memory) the database runs with a rollback journal and a warning is logged.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

from refold.errors import RefoldError, StorageError

log = logging.getLogger(__name__)

Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]


class Database:
    """A thread-safe wrapper around one ``sqlite3.Connection`` in autocommit mode."""

    def __init__(self, path: str, *, synchronous: Synchronous = "FULL",
                 busy_timeout_ms: int = 30_000, vfs: str | None = None) -> None:
        self.path = path
        self._lock = threading.RLock()
        self._closed = False
        self.memory = path == ":memory:"
        self.conn = self._connect(path, vfs, busy_timeout_ms)
        self.journal_mode = self._set_journal_mode()
        with self.translated():
            self.conn.execute(f"PRAGMA synchronous={synchronous}")
            self.conn.execute("PRAGMA foreign_keys=ON")

    @staticmethod
    def _connect(path: str, vfs: str | None, busy_timeout_ms: int) -> sqlite3.Connection:
        try:
            if path != ":memory:":
                parent = os.path.dirname(os.path.abspath(path))
                os.makedirs(parent, exist_ok=True)
            target = path
            uri = False
            if vfs:
                target, uri = f"file:{os.path.abspath(path)}?vfs={vfs}", True
            conn = sqlite3.connect(target, uri=uri, isolation_level=None,
                                   check_same_thread=False,
                                   timeout=busy_timeout_ms / 1000)
            conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
            return conn
        except (sqlite3.Error, OSError) as exc:
            raise StorageError(f"cannot open the database at {path}: {exc}",
                               hint="check the path and its permissions") from exc

    def _set_journal_mode(self) -> str:
        if self.memory:
            return "memory"
        with self.translated():
            mode = str(self.conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]).lower()
            if mode == "wal":
                return mode
            log.warning("cannot use WAL for %s (journal_mode stays %r); falling back to a "
                        "rollback journal: concurrent readers will wait for writers",
                        self.path, mode)
            mode = str(self.conn.execute("PRAGMA journal_mode=DELETE").fetchone()[0]).lower()
            return mode

    @contextmanager
    def translated(self) -> Iterator[None]:
        """Turn sqlite3 errors into StorageError (the only place this happens)."""
        try:
            yield
        except RefoldError:
            raise
        except sqlite3.Error as exc:
            raise StorageError(f"database error: {exc}", hint=_hint(exc)) from exc

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A consistent read snapshot (one deferred transaction), or join the current one."""
        with self._lock, self.translated():
            self._check_open()
            if self.conn.in_transaction:
                yield self.conn
                return
            self.conn.execute("BEGIN")
            try:
                yield self.conn
            finally:
                if self.conn.in_transaction:
                    self.conn.execute("COMMIT")

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """An IMMEDIATE write transaction: all or nothing; nested calls join the outer one."""
        with self._lock, self.translated():
            self._check_open()
            if self.conn.in_transaction:
                yield self.conn
                return
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield self.conn
            except BaseException:
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                raise
            self.conn.execute("COMMIT")

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError("the store is closed")

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self.conn.close()


def _hint(exc: sqlite3.Error) -> str | None:
    text = str(exc).lower()
    if "locked" in text or "busy" in text:
        return "another process holds the database; retry, or raise the busy timeout"
    if "malformed" in text or "not a database" in text:
        return "the database file is damaged; run `refold doctor`"
    if "readonly" in text or "read-only" in text:
        return "the database is read-only; check file permissions"
    return None
