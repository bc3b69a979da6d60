"""One SQLite connection, its pragmas, its transactions, and the one place sqlite3 errors die.

Invariants:
- Every public store call runs inside ``read()`` or ``write()``, so the store is safe to share
  between threads (the proxy server uses threads). Writes go through ONE writer connection under a
  re-entrant lock. Reads of a file database use a small pool of read-only connections, so with
  WAL a reader never waits for a writer (or for a search on another thread); a read inside a
  write (same thread) joins the write transaction and sees its rows. ``:memory:`` databases use
  the writer connection for everything (each connection would be a different database).
- ``write()`` opens ``BEGIN IMMEDIATE``: the write lock is taken up front, so a read-then-write
  (sync's "what is stored already?") can never race another process. Nested ``write()`` calls
  join the outer transaction.
- A ``sqlite3.Error`` leaving ``read()``/``write()`` becomes a ``StorageError`` (refold errors
  pass through unchanged); a failed ``write()`` is rolled back completely.
- WAL is used where it can be; where the journal mode cannot become WAL (network filesystems,
  VFSes without shared memory) the database runs with a rollback journal and a warning is logged.
- ``nonblocking()`` (per thread): inside it, a call that would wait — the writer lock held by
  another thread, the database locked by another process, no idle reader — raises
  ``WouldBlock`` at once instead, having changed nothing. The proxy uses it to run a turn's
  small, bounded store work on its event loop and falls back to a worker thread otherwise.
- WAL checkpoints run in a background thread (``Checkpointer``), never inside a commit: SQLite's
  automatic checkpoint copies ~1,000 pages back into the database (and syncs it) inside whichever
  commit crosses the mark, which made one turn in ~60 take 15-20 ms instead of 0.6
  (``bench/bench_proxy.py``). The thread runs a PASSIVE checkpoint (it never blocks readers or
  the writer) a moment after writes, or at once after ``CHECKPOINT_COMMITS`` of them; the
  automatic checkpoint stays on at ``BACKSTOP_PAGES`` in case the thread cannot keep up.
- The WAL restarts from its start only after a *complete* checkpoint. Under a steady write load
  a commit lands during nearly every background pass, so the log grew for ever and every commit
  extended the file (on ext4 a fdatasync that also journals the new size: about 1.5-2x the cost
  of overwriting frames in place). So after each pass the thread runs a second, short one
  holding the writer lock (no commit of this process can land during it; the lock is taken with
  a short timeout, and a long write transaction just postpones it): it copies the few frames
  committed during the first, the log is then complete and the next write transaction starts it
  over. The writer never checkpoints itself: on ``refold serve``'s event loop that would block
  the loop on the database file's fsync.
- The WAL file stays bounded: ``journal_size_limit`` truncates it to ``wal_limit_bytes`` each
  time the WAL restarts, and when it has grown past that (a long read kept the checkpoint from
  finishing) the thread runs a TRUNCATE checkpoint with a short busy timeout (a busy database
  only postpones it). Without this the file keeps its high-water size for ever (a proxy's WAL
  sat at 63 MiB, 25x its data).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

from refold._lazy import logger
from refold.errors import RefoldError, StorageError, WouldBlock

log = logger(__name__)

Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]
MAX_READERS = 4  # read connections per store (file databases)
CHECKPOINT_DELAY = 0.5  # seconds after a write before the background checkpoint
CHECKPOINT_COMMITS = 200  # or at once after this many commits
BACKSTOP_PAGES = 16_000  # SQLite's own automatic checkpoint, if the thread falls behind
WAL_LIMIT_BYTES = 8 * 1024 * 1024  # the WAL file is truncated back to this
TRUNCATE_BUSY_MS = 100  # how long a TRUNCATE checkpoint may wait for readers and the writer
FINISH_LOCK_WAIT = 0.05  # seconds the finishing pass waits for the writer lock, else next run


class Checkpointer:
    """A daemon thread that checkpoints a WAL database on its own connection (see the module
    docstring). ``wrote()`` after each commit; ``stop()`` at close."""

    def __init__(self, path: str, vfs: str | None, busy_timeout_ms: int,
                 wal_limit_bytes: int = WAL_LIMIT_BYTES,
                 writer_lock: threading.RLock | None = None) -> None:
        self._args = (path, vfs, busy_timeout_ms)
        self._writer_lock = writer_lock  # held for the finishing pass (module doc)
        self.wal_path = path + "-wal"
        self.wal_limit_bytes = wal_limit_bytes
        self.truncations = 0  # TRUNCATE checkpoints that completed (tests and diagnostics)
        self._commits = 0
        self._wake = threading.Event()
        self._stopped = False
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self.runs = 0  # checkpoints done (tests and diagnostics)

    def wrote(self) -> None:
        self._commits += 1
        if self._thread is None:
            with self._start_lock:
                if self._thread is None and not self._stopped:
                    self._thread = threading.Thread(target=self._run, daemon=True,
                                                    name="refold-sqlite-checkpoint")
                    self._thread.start()
        if self._commits >= CHECKPOINT_COMMITS:
            self._wake.set()

    def _run(self) -> None:
        conn: sqlite3.Connection | None = None
        try:
            conn = Database._connect(*self._args)
            conn.execute(f"PRAGMA journal_size_limit={int(self.wal_limit_bytes)}")
            while not self._stopped:
                self._wake.wait(CHECKPOINT_DELAY)
                self._wake.clear()
                if self._commits == 0 or self._stopped:
                    continue
                self._commits = 0
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                self._finish(conn)
                self.runs += 1
                if self._wal_size() > self.wal_limit_bytes:
                    self._truncate(conn)
        except (sqlite3.Error, StorageError) as exc:  # SQLite's backstop checkpoint remains
            log.warning("background WAL checkpoints stopped for %s: %s", self._args[0], exc)
        finally:
            if conn is not None:
                conn.close()

    def _finish(self, conn: sqlite3.Connection) -> None:
        """The short second pass, under the writer lock (module doc). PASSIVE never waits: a
        reader on an old snapshot, or another process's commit, leaves the rest to the next
        run."""
        lock = self._writer_lock
        if lock is None or not lock.acquire(timeout=FINISH_LOCK_WAIT):
            return
        try:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        finally:
            lock.release()

    def _wal_size(self) -> int:
        try:
            return os.path.getsize(self.wal_path)
        except OSError:
            return 0

    def _truncate(self, conn: sqlite3.Connection) -> None:
        """Checkpoint everything and truncate the WAL, waiting at most ``TRUNCATE_BUSY_MS``
        for readers and the writer; a busy database postpones it to a later run."""
        conn.execute(f"PRAGMA busy_timeout={TRUNCATE_BUSY_MS}")
        try:
            busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
        except sqlite3.OperationalError as exc:  # busy or locked: try again later
            log.debug("WAL truncation postponed: %s", exc)
            busy = 1
        finally:
            conn.execute(f"PRAGMA busy_timeout={int(self._args[2])}")
        if not busy:
            self.truncations += 1
        else:
            self._commits = max(self._commits, 1)  # look again at the next run

    def stop(self) -> None:
        self._stopped = True
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)


class _NoWait:
    """``Database.nonblocking()``: a plain class, not a generator (three per proxied turn)."""

    __slots__ = ("_local", "_outer")

    def __init__(self, local: threading.local) -> None:
        self._local = local
        self._outer = False

    def __enter__(self) -> None:
        self._outer = getattr(self._local, "nowait", False)
        self._local.nowait = True

    def __exit__(self, *exc: object) -> None:
        self._local.nowait = self._outer


class _Write:
    """``Database.write()``: a plain class, not generators (two per proxied turn): the write
    lock, BEGIN IMMEDIATE unless joining an outer transaction, COMMIT or ROLLBACK, and
    sqlite3 errors as StorageError."""

    __slots__ = ("_began", "_db")

    def __init__(self, db: Database) -> None:
        self._db = db
        self._began = False

    def __enter__(self) -> sqlite3.Connection:
        db = self._db
        db._acquire()
        try:
            conn, self._began = db._write_begin()
        except BaseException as exc:
            db._lock.release()
            if isinstance(exc, sqlite3.Error):
                raise db._storage_error(exc) from exc
            raise
        return conn

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: object) -> None:
        db = self._db
        try:
            db._write_end(self._began, exc is not None)
        except sqlite3.Error as error:
            raise db._storage_error(error) from error
        finally:
            db._lock.release()
        if isinstance(exc, sqlite3.Error) and not isinstance(exc, RefoldError):
            raise db._storage_error(exc) from exc


class Database:
    """A thread-safe wrapper around one ``sqlite3.Connection`` in autocommit mode."""

    def __init__(self, path: str, *, synchronous: Synchronous = "FULL",
                 busy_timeout_ms: int = 30_000, vfs: str | None = None,
                 wal_limit_bytes: int = WAL_LIMIT_BYTES) -> None:
        self.path = path
        self._lock = threading.RLock()
        self._closed = False
        self.memory = path == ":memory:"
        self._vfs = vfs
        self._busy_timeout_ms = busy_timeout_ms
        self.synchronous = synchronous
        self._writer_thread: int | None = None
        self._data_version: int | None = None  # the writer connection's, as last read
        self._local = threading.local()  # the reader connection this thread is using, if any
        self._pool = threading.Condition()
        self._idle: list[sqlite3.Connection] = []
        self._readers: list[sqlite3.Connection] = []
        self.conn = self._connect(path, vfs, busy_timeout_ms)
        try:
            self._refuse_foreign()
        except BaseException:
            self.conn.close()
            raise
        self._writer_busy_ms = int(busy_timeout_ms)  # the writer connection's busy_timeout now
        self.journal_mode = self._set_journal_mode()
        self.checkpointer: Checkpointer | None = None
        with self.translated():
            self.conn.execute(f"PRAGMA synchronous={synchronous}")
            self.conn.execute("PRAGMA foreign_keys=ON")
            if self.journal_mode == "wal":
                self.conn.execute(f"PRAGMA wal_autocheckpoint={BACKSTOP_PAGES}")
                self.conn.execute(f"PRAGMA journal_size_limit={int(wal_limit_bytes)}")
                self.checkpointer = Checkpointer(path, vfs, busy_timeout_ms, wal_limit_bytes,
                                                 writer_lock=self._lock)

    @staticmethod
    def _connect(path: str, vfs: str | None, busy_timeout_ms: int) -> sqlite3.Connection:
        if path != ":memory:" and os.path.isdir(path):
            raise StorageError(f"cannot open the database at {path}: it is a directory",
                               hint=f"name a file, e.g. {os.path.join(path, 'refold.db')}")
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

    def _refuse_foreign(self) -> None:
        """A SQLite database that holds tables but not refold's (another program's: an app's,
        Hermes' state.db) is never touched: no schema is added and its journal mode stays as it
        is (both happened to any file ``--db`` named, read-only commands included)."""
        if self.memory:
            return
        with self.translated():
            names = {str(r[0]) for r in self.conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()}
        if names and "schema_migrations" not in names:
            shown = ", ".join(sorted(n for n in names if not n.startswith("sqlite_"))[:5])
            raise StorageError(f"{self.path} is another program's SQLite database (tables: "
                               f"{shown or 'internal only'}), not refold's; refold leaves it "
                               "as it is",
                               hint="point --db / REFOLD_DB at refold's own database file "
                                    "(a new path creates one); `refold import` reads Hermes' "
                                    "and OpenCode's databases")

    def _set_journal_mode(self) -> str:
        if self.memory:
            return "memory"
        with self.translated():
            mode = self._pragma_waiting("PRAGMA journal_mode=WAL")
            if mode == "wal":
                return mode
            log.warning("cannot use WAL for %s (journal_mode stays %r); falling back to a "
                        "rollback journal: concurrent readers will wait for writers",
                        self.path, mode)
            mode = self._pragma_waiting("PRAGMA journal_mode=DELETE")
            return mode

    def _pragma_waiting(self, pragma: str) -> str:
        """Run a journal-mode ``pragma`` and return its answer, waiting up to the busy timeout:
        switching the mode needs the database to itself, and SQLite answers "database is
        locked" at once, without its busy handler, while another process opens the same new
        file (two ``refold`` processes starting on a fresh home: 9 of 80 openings failed)."""
        deadline = time.monotonic() + self._busy_timeout_ms / 1000
        pause = 0.005
        while True:
            try:
                return str(self.conn.execute(pragma).fetchone()[0]).lower()
            except sqlite3.OperationalError as exc:
                text = str(exc).lower()
                if ("locked" not in text and "busy" not in text) \
                        or time.monotonic() + pause > deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 0.1)

    @contextmanager
    def translated(self) -> Iterator[None]:
        """Turn sqlite3 errors into StorageError (the only place this happens)."""
        try:
            yield
        except RefoldError:
            raise
        except sqlite3.Error as exc:
            raise self._storage_error(exc) from exc

    def _storage_error(self, exc: sqlite3.Error) -> StorageError:
        """``translated``'s error for ``exc``."""
        if "not a database" in str(exc).lower():  # no repair makes a text file a database
            return StorageError(f"database error: {self.path} is not a SQLite database",
                                hint="check --db / REFOLD_DB")
        return StorageError(f"database error: {exc}", hint=_hint(exc))

    def nonblocking(self) -> _NoWait:
        """Calls on this thread raise ``WouldBlock`` instead of waiting (see the docstring)."""
        return _NoWait(self._local)

    def _acquire(self) -> None:
        if not getattr(self._local, "nowait", False):
            self._lock.acquire()
        elif not self._lock.acquire(blocking=False):
            raise WouldBlock("the database is in use by another thread")

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A consistent read snapshot (one deferred transaction), or join the current one."""
        current = getattr(self._local, "conn", None)
        if current is not None:  # nested read on this thread: same snapshot
            yield current
            return
        if self.memory or self._writer_thread == threading.get_ident():
            self._acquire()
            try:
                with self.translated():
                    self._check_open()
                    yield from self._snapshot(self.conn)
            finally:
                self._lock.release()
            return
        with self.translated():
            conn = self._take_reader()
            self._local.conn = conn
            try:
                yield from self._snapshot(conn)
            finally:
                self._local.conn = None
                self._give_back(conn)

    def _snapshot(self, conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
        if conn.in_transaction:
            yield conn
            return
        conn.execute("BEGIN")
        try:
            yield conn
        finally:
            if conn.in_transaction:
                conn.execute("COMMIT")

    def _take_reader(self) -> sqlite3.Connection:
        with self._pool:
            while True:
                self._check_open()
                if self._idle:
                    return self._idle.pop()
                if getattr(self._local, "nowait", False) and len(self._readers) >= MAX_READERS:
                    raise WouldBlock("every reader connection is in use")
                if len(self._readers) < MAX_READERS:
                    conn = self._connect(self.path, self._vfs, self._busy_timeout_ms)
                    conn.execute("PRAGMA query_only=ON")
                    self._readers.append(conn)
                    return conn
                self._pool.wait()

    def _give_back(self, conn: sqlite3.Connection) -> None:
        with self._pool:
            if self._closed:
                conn.close()
            else:
                self._idle.append(conn)
            self._pool.notify()

    def write(self) -> _Write:
        """An IMMEDIATE write transaction: all or nothing; nested calls join the outer one
        (sqlite3 errors come out as StorageError, as from ``translated``)."""
        return _Write(self)

    def _write_begin(self) -> tuple[sqlite3.Connection, bool]:
        """``write``'s start, the lock held: (the connection, whether this began it)."""
        self._check_open()
        if self.conn.in_transaction:
            return self.conn, False
        self._begin_immediate()
        self._writer_thread = threading.get_ident()
        return self.conn, True

    def _write_end(self, began: bool, failed: bool) -> None:
        """``write``'s end, the lock still held: COMMIT (or ROLLBACK when ``failed``) of the
        transaction this call began."""
        if not began:
            return
        if failed:
            try:
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
            finally:
                self._writer_thread = None
            return
        self._writer_thread = None
        # read before COMMIT: while this transaction holds the write lock no other
        # connection can commit, so the mark is at most "the database after this commit"
        mark = self._mark(fresh=False)
        self.conn.execute("COMMIT")
        self._local.mark = mark
        if self.checkpointer is not None:
            self.checkpointer.wrote()

    def _mark(self, fresh: bool = True) -> tuple[int, int]:
        """(``PRAGMA data_version``, ``total_changes``) of the writer connection: the first
        moves when another connection (another process) commits, the second when a statement
        on this one changes rows. Equal marks: nothing was written in between.

        ``fresh=False`` (a commit's mark) may take the version this connection read last
        instead of asking again: any version read before the commit only ever makes a later
        ``unchanged_since`` say "changed" (another process committed in between: the versions
        differ), never "unchanged" wrongly; a fresh read there refreshes it. That saves a
        statement in each write transaction (two per proxied turn)."""
        version = self._data_version
        if fresh or version is None:
            version = self._data_version = int(
                self.conn.execute("PRAGMA data_version").fetchone()[0])
        return version, self.conn.total_changes

    def last_commit_mark(self) -> tuple[int, int] | None:
        """The mark (``_mark``) of the last write transaction this thread committed."""
        mark: tuple[int, int] | None = getattr(self._local, "mark", None)
        return mark

    def unchanged_since(self, mark: tuple[int, int] | None) -> bool:
        """True when nothing has been committed to the database since the commit that gave
        ``mark`` (``last_commit_mark``), by this process or any other. Non-blocking mode: the
        writer connection busy raises ``WouldBlock``."""
        if mark is None:
            return False
        self._acquire()
        try:
            self._check_open()
            return self._mark() == mark
        except sqlite3.Error as exc:
            raise self._storage_error(exc) from exc
        finally:
            self._lock.release()

    def _begin_immediate(self) -> None:
        nowait = bool(getattr(self._local, "nowait", False)) and not self.memory
        # non-blocking: another process writing makes BEGIN fail at once (WouldBlock) instead
        # of waiting. The writer connection keeps whichever timeout its last write needed, so
        # a run of non-blocking writes (the proxy's light turns) sets it once, not twice each.
        wanted = 0 if nowait else int(self._busy_timeout_ms)
        if self._writer_busy_ms != wanted:
            self.conn.execute(f"PRAGMA busy_timeout={wanted}")
            self._writer_busy_ms = wanted
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            text = str(exc).lower()
            if nowait and ("locked" in text or "busy" in text):
                raise WouldBlock("another process is writing to the database") from exc
            raise

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError("the store is closed")

    def close(self) -> None:
        if self.checkpointer is not None:
            self.checkpointer.stop()
        with self._lock, self._pool:
            if not self._closed:
                self._closed = True
                self.conn.close()
                for conn in self._idle:  # readers in use close when given back
                    conn.close()
                self._idle.clear()
                self._pool.notify_all()


def _hint(exc: sqlite3.Error) -> str | None:
    text = str(exc).lower()
    if "locked" in text or "busy" in text:
        return "another process holds the database; retry, or raise the busy timeout"
    if "malformed" in text:
        return ("the database file is damaged; run `refold doctor --repair` (it rebuilds the "
                "search indexes; damage it cannot mend stays failed and needs a backup)")
    if "readonly" in text or "read-only" in text:
        return "the database is read-only; check file permissions"
    return None
