"""The embedded SQLite backend of the ``Store`` Protocol (see ``store.SQLiteStore``)."""

from refold.store.sqlite.store import SQLiteStore

__all__ = ["SQLiteStore"]
