"""Storage: the ``Store`` Protocol, its records, and ``open_store`` which picks a backend by URL.

``sqlite:///path/to/refold.db``, a bare filesystem path, or ``:memory:`` open the embedded SQLite
backend; ``postgresql://…`` (or ``postgres://…``) opens the PostgreSQL backend, which needs the
``refold[postgres]`` extra.
"""

from __future__ import annotations

from pathlib import Path

from refold.errors import InvalidInput, NotFound
from refold.store.base import (
    AppendResult,
    Checkpoint,
    CheckpointDraft,
    Event,
    MemoryRow,
    Projection,
    RewindRecord,
    SearchHit,
    SearchQuery,
    Session,
    Store,
    StoredMessage,
)


def open_store(target: str | Path, *, sqlite_synchronous: str | None = None,
               create: bool = True) -> Store:
    """Open (creating and migrating if needed) the store at ``target``.

    ``create=False`` (read-only commands) never creates a store: a PostgreSQL schema, or a
    SQLite file, that holds no refold data raises ``NotFound`` instead. A PostgreSQL URL without
    ``?schema=`` names the ``refold`` schema, or ``public`` where an earlier install lives.

    ``sqlite_synchronous`` ("FULL", the default, or "NORMAL") applies to SQLite only: FULL
    fsyncs every commit (durable against power loss), NORMAL in WAL mode is durable against a
    process crash but may lose the last commits on power loss or an OS crash.
    """
    text = str(target)
    if text.startswith(("postgresql://", "postgres://")):
        try:
            from refold.store.postgres import PostgresStore
        except ImportError as exc:  # psycopg missing
            raise InvalidInput(
                "the PostgreSQL backend needs psycopg",
                hint="pip install 'refold[postgres]'") from exc
        return PostgresStore(text, create=create)
    path = sqlite_file_of(text)
    if not create and path != ":memory:" and (not Path(path).exists()
                                              or not _has_refold_data(path)):
        raise NotFound(f"no refold database at {path}",
                       hint="check --db / REFOLD_DB; `refold import FILE` creates one")
    from refold.store.sqlite import SQLiteStore

    if sqlite_synchronous is None:
        return SQLiteStore(path)
    mode = sqlite_synchronous.upper()
    if mode not in ("FULL", "NORMAL"):
        raise InvalidInput(f"unknown SQLite synchronous mode {sqlite_synchronous!r}",
                           hint="use FULL or NORMAL")
    return SQLiteStore(path, synchronous="FULL" if mode == "FULL" else "NORMAL")


def _has_refold_data(path: str) -> bool:
    """Whether the SQLite file at ``path`` holds refold's tables, read without changing it (an
    empty file has none; a file that is not SQLite, or another program's database, says so
    when opened)."""
    import sqlite3

    try:
        if Path(path).stat().st_size == 0:
            return False
        conn = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True)
        try:
            return conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'"
                                ).fetchone()[0] > 0
        finally:
            conn.close()
    except (OSError, sqlite3.Error):
        return True  # not readable so: opening it gives the precise error


def sqlite_file_of(target: str | Path) -> str:
    """The SQLite path a database target names (a bare path, ``sqlite:///path`` or
    ``:memory:``); ``InvalidInput`` for another URL scheme (PostgreSQL URLs are not SQLite)."""
    text = str(target)
    if text.startswith("sqlite://"):
        text = text[len("sqlite://"):]
        if text.startswith("/") and text[1:].startswith("/"):
            text = text[1:]  # sqlite:////abs/path -> /abs/path ; sqlite:///rel -> /rel kept
    if "://" in text:
        raise InvalidInput(f"unknown database URL scheme in {target!r}",
                           hint="use a file path, sqlite:///path or postgresql://…")
    return text


__all__ = [
    "AppendResult",
    "Checkpoint",
    "CheckpointDraft",
    "Event",
    "MemoryRow",
    "Projection",
    "RewindRecord",
    "SearchHit",
    "SearchQuery",
    "Session",
    "Store",
    "StoredMessage",
    "open_store",
]
