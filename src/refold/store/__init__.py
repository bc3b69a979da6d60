"""Storage: the ``Store`` Protocol, its records, and ``open_store`` which picks a backend by URL.

``sqlite:///path/to/refold.db``, a bare filesystem path, or ``:memory:`` open the embedded SQLite
backend; ``postgresql://…`` (or ``postgres://…``) opens the PostgreSQL backend, which needs the
``refold[postgres]`` extra.
"""

from __future__ import annotations

import re
from pathlib import Path

from refold.errors import InvalidInput, NotFound, StorageError
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

    mode = (sqlite_synchronous or "FULL").upper()
    if mode not in ("FULL", "NORMAL"):
        raise InvalidInput(f"unknown SQLite synchronous mode {sqlite_synchronous!r}",
                           hint="use FULL or NORMAL")
    try:
        return SQLiteStore(path, synchronous="FULL" if mode == "FULL" else "NORMAL")
    except StorageError as exc:
        if "malformed" not in str(exc.__cause__ or "").lower():
            raise
        raise unopenable(path, exc.__cause__) from exc


def unopenable(path: str, cause: BaseException | None) -> StorageError:
    """The error for a SQLite file too damaged to open (truncated, overwritten). What a
    damaged file that opens is told (run ``refold doctor --repair``, which rebuilds the search
    indexes) cannot help: doctor opens it the same way, and it did nothing. Said instead, with
    what can: the newest copy ``doctor --repair`` made beside it before (``<file>.bak-<UTC
    time>``), else a backup, and SQLite's shell, which may save part of it."""
    copies = sorted(Path(path).parent.glob(f"{Path(path).name}.bak-*"))
    restore = (f"restore the copy `refold doctor --repair` made before ({copies[-1]}: copy it "
               f"over {path})" if copies else "restore it from a backup")
    return StorageError(
        f"the database {path} is damaged and cannot be opened ({cause}); refold cannot "
        "repair that itself",
        hint=f"{restore}; or save what SQLite still reads: sqlite3 {path} .recover | sqlite3 "
             "rescued.db (.dump where .recover fails), then `refold --db rescued.db doctor "
             "--repair`")


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


# what reads as a URL's scheme ("postgresql:", "sqlite:", "https:"): a target that starts so is
# never taken as a relative file name. A Windows drive ("C:\\", "C:/") is one letter: a path.
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_DRIVE = re.compile(r"^[A-Za-z]:[\\/]")
# a scheme's name with its colon lost ("postgresql//host/db"): a typo, not a folder so named
_SCHEME_NO_COLON = re.compile(r"^(postgres(ql)?|sqlite)//", re.IGNORECASE)
ACCEPTED = "a file path, sqlite:///absolute/path or postgresql://[user@]host[:port]/db"


def _without_password(text: str, after: int) -> str:
    """``text`` with the password of its user info (``user:password@``, after the scheme and
    its slashes, before the host) as ``***``; a user name alone is shown as written."""
    start = after + len(text[after:]) - len(text[after:].lstrip("/"))
    at = text.find("@", start)
    if at < 0 or "/" in text[start:at]:
        return text
    colon = text.find(":", start, at)
    return text if colon < 0 else text[:colon + 1] + "***" + text[at:]


def sqlite_file_of(target: str | Path) -> str:
    """The SQLite path a database target names (a bare path, ``sqlite:///path`` or
    ``:memory:``); ``InvalidInput`` for anything else that reads as a URL.

    ``sqlite:///path`` and ``sqlite:////path`` both name the absolute ``/path`` (as refold
    always read them; SQLAlchemy reads three slashes as relative), ``sqlite:///~/path`` a
    path under the home. A relative file is given as a bare path: ``sqlite://tmp/a.db`` (is
    it ``/tmp/a.db`` or ``tmp/a.db``?) is refused, and so is any other text that starts as a
    URL's scheme (``postgresql:/host/db``, ``sqlite:x.db``, ``postgresql//host/db``): a typo
    in a PostgreSQL URL became a SQLite file named like it in the working directory, which
    every command then used without a word (``migrate`` said "verification ok")."""
    text = str(target)
    if text.startswith("sqlite://"):
        rest = text[len("sqlite://"):]
        if not rest.startswith("/") or rest.strip("/") == "":
            raise InvalidInput(
                f"the SQLite URL {text!r} names no absolute path",
                hint=f"give sqlite:///{rest.lstrip('/') or 'path/to/refold.db'} for "
                     f"/{rest.lstrip('/') or 'path/to/refold.db'}, or a bare path "
                     f"({rest.lstrip('/') or 'refold.db'}) for a file relative to here")
        text = "/" + rest.lstrip("/")  # sqlite:///abs and sqlite:////abs -> /abs
        if text.startswith("/~/") or text == "/~":
            text = str(Path(text[1:]).expanduser())
        return text
    if text == ":memory:" or _DRIVE.match(text):
        return text
    scheme = _SCHEME.match(text) or _SCHEME_NO_COLON.match(text)
    if scheme is not None:
        name = scheme.group(0).rstrip(":/").lower()
        shown = _without_password(text, scheme.end())  # a password stays out of the message
        why = (f"is a mistyped {name}:// URL" if name in ("postgresql", "postgres", "sqlite")
               else f"names no database refold reads ({name}: is neither SQLite nor "
                    "PostgreSQL)")
        raise InvalidInput(f"{shown!r} {why}",
                           hint=f"use {ACCEPTED}; a file whose name holds a colon: ./NAME")
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
