"""The connection pool, the schema it points at, and the one place psycopg errors are translated.

Every connection the pool hands out has ``search_path`` set to the store's schema (then the schema
holding ``pg_trgm``), so SQL in this package never names a schema and a test can run in a fresh
one. ``translate_errors`` turns psycopg and pool failures into refold's error tree:

    UniqueViolation / ExclusionViolation      -> Conflict
    NUL bytes, bad encodings, DataError       -> InvalidInput
    QueryCanceled (statement_timeout)         -> StorageError (search: caught and bounded)
    anything else from the driver or the pool -> StorageError
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
import psycopg_pool
from psycopg import sql

from refold.errors import Conflict, InvalidInput, StorageError

log = logging.getLogger(__name__)

_SCHEMA_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


def check_schema_name(schema: str) -> str:
    if not _SCHEMA_NAME.match(schema):
        raise InvalidInput(f"invalid PostgreSQL schema name {schema!r}",
                           hint="use letters, digits and underscores (at most 63)")
    return schema


def split_url(url: str) -> tuple[str, str | None]:
    """``(conninfo, schema)``: a ``?schema=NAME`` query parameter is refold's, not libpq's."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schema = next((v for k, v in query if k == "schema"), None)
    rest = urlencode([(k, v) for k, v in query if k != "schema"])
    return urlunsplit(parts._replace(query=rest)), schema


def with_schema(url: str, schema: str) -> str:
    """``url`` naming ``schema`` in its query (so reopening ``store.url`` finds the same data)."""
    conninfo, _ = split_url(url)
    if schema == "public":
        return conninfo
    parts = urlsplit(conninfo)
    query = "&".join(q for q in (parts.query, urlencode([("schema", schema)])) if q)
    return urlunsplit(parts._replace(query=query))



@contextmanager
def translate_errors(action: str) -> Iterator[None]:
    """Run a block, turning driver failures into refold errors that name ``action``."""
    try:
        yield
    except (psycopg.errors.UniqueViolation, psycopg.errors.ExclusionViolation) as exc:
        raise Conflict(f"{action}: {_first_line(exc)}") from exc
    except (psycopg.DataError, UnicodeEncodeError) as exc:
        raise InvalidInput(f"{action}: {_first_line(exc)}",
                           hint="text must not contain NUL bytes or unpaired surrogates") from exc
    except psycopg_pool.PoolTimeout as exc:
        raise StorageError(f"{action}: no free PostgreSQL connection ({exc})",
                           hint="raise max_size or check for stuck connections") from exc
    except psycopg.Error as exc:
        raise StorageError(f"{action}: {_first_line(exc)}") from exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else exc.__class__.__name__


def make_pool(conninfo: str, search_path: list[str], *, min_size: int, max_size: int,
              timeout: float) -> psycopg_pool.ConnectionPool:
    """An open pool whose connections all use ``search_path``."""
    path = sql.SQL(", ").join(sql.Identifier(s) for s in search_path)
    statement = sql.SQL("SET search_path TO {}").format(path)

    def configure(conn: psycopg.Connection[Any]) -> None:
        conn.execute(statement)
        conn.commit()

    # ``check`` costs one empty round trip per checkout; in exchange a connection the server
    # dropped (restart, failover, idle kill) is replaced instead of failing the caller's call.
    pool: psycopg_pool.ConnectionPool = psycopg_pool.ConnectionPool(
        conninfo, min_size=min_size, max_size=max_size, timeout=timeout, configure=configure,
        check=psycopg_pool.ConnectionPool.check_connection, open=False, name="refold")
    with translate_errors("cannot connect to PostgreSQL"):
        pool.open(wait=True, timeout=timeout)
    return pool


def connect(conninfo: str, *, timeout: float) -> psycopg.Connection[Any]:
    """A single autocommit connection (used to bootstrap the schema before the pool exists)."""
    with translate_errors("cannot connect to PostgreSQL"):
        return psycopg.connect(conninfo, autocommit=True, connect_timeout=max(1, int(timeout)))
