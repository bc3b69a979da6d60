"""Storage: the ``Store`` Protocol, its records, and ``open_store`` which picks a backend by URL.

``sqlite:///path/to/refold.db``, a bare filesystem path, or ``:memory:`` open the embedded SQLite
backend; ``postgresql://…`` (or ``postgres://…``) opens the PostgreSQL backend, which needs the
``refold[postgres]`` extra.
"""

from __future__ import annotations

from pathlib import Path

from refold.errors import InvalidInput
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


def open_store(target: str | Path) -> Store:
    """Open (creating and migrating if needed) the store at ``target``."""
    text = str(target)
    if text.startswith(("postgresql://", "postgres://")):
        try:
            from refold.store.postgres import PostgresStore
        except ImportError as exc:  # psycopg missing
            raise InvalidInput(
                "the PostgreSQL backend needs psycopg",
                hint="pip install 'refold[postgres]'") from exc
        return PostgresStore(text)
    if text.startswith("sqlite://"):
        text = text[len("sqlite://"):]
        if text.startswith("/") and text[1:].startswith("/"):
            text = text[1:]  # sqlite:////abs/path -> /abs/path ; sqlite:///rel -> /rel kept
    if "://" in text:
        raise InvalidInput(f"unknown database URL scheme in {target!r}",
                           hint="use a file path, sqlite:///path or postgresql://…")
    from refold.store.sqlite import SQLiteStore

    return SQLiteStore(text)


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
