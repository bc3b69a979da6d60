"""``SQLiteStore``: the embedded ledger backend (one file, WAL, FTS5).

Composed from mixins, one per concern: ``SessionOps`` (sessions, lineage) → ``LedgerOps``
(messages, rewind, fork) → ``StateOps`` (checkpoints, projection, events, leases, memory) →
``SearchOps`` (search). This module adds opening/migrating and maintenance.

Invariants: the schema is migrated before the first call returns; every call is one
transaction (see ``database.Database``); ``prune_sessions`` removes only whole idle lineages
(``refold.store.lifecycle``).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from typing import Any

from refold._lazy import logger
from refold.errors import InvalidInput
from refold.store.sqlite import cjklen, glued, grams, indexer, wordseal
from refold.store.sqlite.bulk import BulkOps
from refold.store.sqlite.database import WAL_LIMIT_BYTES, Database, Synchronous
from refold.store.sqlite.indexcheck import index_gaps
from refold.store.sqlite.schema import LATEST_VERSION, applied_versions, migrate
from refold.store.sqlite.search import SearchOps
from refold.store.sqlite.vectors import VectorOps

log = logger(__name__)


class SQLiteStore(SearchOps, VectorOps, BulkOps):
    """The SQLite implementation of ``refold.store.Store``.

    ``path`` is a file path or ``":memory:"``. ``synchronous="FULL"`` makes every commit durable
    against power loss (``"NORMAL"`` is durable against process crashes only, and faster).
    ``vfs`` picks an SQLite VFS (e.g. ``"unix-dotfile"`` on filesystems without POSIX locks).
    ``scan_budget_seconds`` caps the exact substring scan used for 1–2 character CJK queries.
    ``wal_limit_bytes`` bounds the WAL file: it is truncated back to this size whenever it grew
    past it (a long reader held it) and a checkpoint could complete.
    """

    def __init__(self, path: str | os.PathLike[str] = ":memory:", *,
                 synchronous: Synchronous = "FULL",
                 busy_timeout_ms: int = 30_000, vfs: str | None = None,
                 scan_budget_seconds: float = 2.0,
                 wal_limit_bytes: int = WAL_LIMIT_BYTES) -> None:
        if synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise InvalidInput(f"unknown synchronous mode {synchronous!r}")
        path = os.fspath(path)  # a pathlib.Path is as good as its string
        self.url = path if path == ":memory:" else f"sqlite:///{path}"
        self.path = path
        self.scan_budget_seconds = scan_budget_seconds
        self.db = Database(path, synchronous=synchronous, busy_timeout_ms=busy_timeout_ms,
                           vfs=vfs, wal_limit_bytes=wal_limit_bytes)
        try:
            with self.db.translated():
                migrate(self.db.conn)
        except BaseException:
            self.db.close()
            raise

    @property
    def journal_mode(self) -> str:
        return self.db.journal_mode

    @property
    def commits_are_quick(self) -> bool:
        """True when a commit does no fsync (WAL with synchronous NORMAL/OFF, or in memory):
        small writes then take microseconds, and an event loop may make them itself."""
        return self.db.memory or (self.db.journal_mode == "wal"
                                  and self.db.synchronous in ("NORMAL", "OFF"))

    def nonblocking(self) -> contextlib.AbstractContextManager[None]:
        """Within it (this thread), a call that would wait raises ``WouldBlock`` instead."""
        return self.db.nonblocking()

    def commit_mark(self) -> object | None:
        """An opaque mark of the database right after this thread's last commit."""
        return self.db.last_commit_mark()

    def unchanged_since(self, mark: object | None) -> bool:
        """Nothing committed since ``commit_mark()`` gave ``mark`` (any connection, any
        process): what was read or written then is still what is stored."""
        return self.db.unchanged_since(mark)  # type: ignore[arg-type]

    def prune_sessions(self, older_than_days: float) -> int:
        """Delete whole lineages idle for more than ``older_than_days`` with no session in
        use (see ``refold.store.lifecycle``); returns how many sessions went."""
        from refold.store.lifecycle import prune_older_than

        return prune_older_than(self, older_than_days)

    def integrity_check(self) -> list[str]:
        """Problems found by SQLite, the foreign keys and the FTS indexes ([] when all is well)."""
        problems: list[str] = []
        self.catch_up_index()  # the FTS5 checks compare the whole table with its index
        with self.db.read() as conn:
            rows = [str(r[0]) for r in conn.execute("PRAGMA integrity_check")]
            problems += [r for r in rows if r != "ok"]
            problems += [f"foreign key: {r[0]} row {r[1]} -> {r[2]}"
                         for r in conn.execute("PRAGMA foreign_key_check")]
        with self.db.read() as conn:
            problems += index_gaps(conn)
            problems += cjklen.block_problems(conn)
        # rank = 1 also compares the external-content index with the messages table.
        checks = (("messages_fts", ", rank", ", 1"), ("messages_trigram", "", ""),
                  ("messages_cjk_grams", "", ""))
        for table, column, value in checks:
            try:
                with self.db.write() as conn:
                    indexer.index_pending(conn)
                    conn.execute(f"INSERT INTO {table}({table}{column}) "
                                 f"VALUES ('integrity-check'{value})")
            except Exception as exc:  # any failure here is a finding, not a crash
                problems.append(f"{table}: {exc}")
        return problems

    def rebuild_search_indexes(self) -> None:
        """Rebuild the search indexes from the messages table (repair after damage).

        SQLite-only maintenance (``integrity_check`` reports the damage this repairs): the
        word index is rebuilt from its external content; the contentless trigram and gram
        indexes are emptied and refilled from the CJK rows, the CJK lengths too; the word
        impact index is emptied, to be sealed again. One transaction.
        """
        with self.db.write() as conn:
            conn.execute("INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')")
            conn.execute("INSERT INTO messages_trigram(messages_trigram) VALUES ('delete-all')")
            conn.execute("INSERT INTO messages_trigram(rowid, text) "
                         "SELECT id, text FROM messages WHERE has_cjk = 1")
            conn.execute(f"INSERT INTO {grams.TABLE}({grams.TABLE}) VALUES ('delete-all')")
            grams.backfill(conn)
            conn.execute(f"UPDATE {indexer.STATE} SET indexed_through = "
                         "(SELECT coalesce(max(id), 0) FROM messages) WHERE id = 1")
            cjklen.rebuild(conn)
            glued.rebuild(conn)
            wordseal.reset(conn)  # sealed again by searches, or all at once by `refold index`
        log.info("search indexes rebuilt for %s", self.path)

    def backup(self, destination: str) -> None:
        """A consistent copy of the database at ``destination`` (SQLite's online backup)."""
        if self.db.memory:
            raise InvalidInput("an in-memory database has no file to back up")
        target = sqlite3.connect(destination)
        try:
            with self.db.read() as conn:
                conn.backup(target)
        finally:
            target.close()

    def info(self) -> dict[str, Any]:
        with self.db.read() as conn:
            counts = {table: conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
                      for table in ("sessions", "messages", "checkpoints", "events")}
            versions = sorted(applied_versions(conn))
        return {"backend": "sqlite", "path": self.path, "sqlite_version": sqlite3.sqlite_version,
                "journal_mode": self.db.journal_mode, "schema_version": max(versions),
                "schema_latest": LATEST_VERSION, **counts}

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
