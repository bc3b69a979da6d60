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
from urllib.parse import SplitResult, unquote, urlencode, urlsplit, urlunsplit

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


def _unsplit(parts: SplitResult) -> str:
    """``urlunsplit`` that keeps the ``//`` of a URL without a host: ``postgresql:///db`` (a
    Unix socket, or ``?host=`` in the query) must not become ``postgresql:/db``, which libpq
    reads as a ``key=value`` string."""
    if parts.scheme and not parts.netloc:
        url = f"{parts.scheme}://{parts.path}"
        if parts.query:
            url += f"?{parts.query}"
        return url + (f"#{parts.fragment}" if parts.fragment else "")
    return urlunsplit(parts)


def split_url(url: str) -> tuple[str, str | None]:
    """``(conninfo, schema)``: a ``?schema=NAME`` query parameter is refold's, not libpq's.

    The other parameters are passed on exactly as written (libpq decodes ``%XX`` but not
    ``+``, so re-encoding them could change a value such as ``options=-c%20…``)."""
    parts = urlsplit(url)
    schema: str | None = None
    rest: list[str] = []
    for item in parts.query.split("&"):
        if not item:
            continue
        key, _, value = item.partition("=")
        if unquote(key) == "schema":
            schema = unquote(value)
        else:
            rest.append(item)
    return _unsplit(parts._replace(query="&".join(rest))), schema


def with_schema(url: str, schema: str) -> str:
    """``url`` naming ``schema`` in its query (so reopening ``store.url`` finds the same data)."""
    conninfo, _ = split_url(url)
    if schema == "public":
        return conninfo
    parts = urlsplit(conninfo)
    query = "&".join(q for q in (parts.query, urlencode([("schema", schema)])) if q)
    return _unsplit(parts._replace(query=query))


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
    except ConnectFailed as exc:
        raise StorageError(f"{action}: cannot connect to PostgreSQL: {exc.cause}",
                           hint="check that the server is up and the database and role "
                                "exist") from exc
    except psycopg_pool.PoolTimeout as exc:
        raise StorageError(f"{action}: no free PostgreSQL connection ({exc})",
                           hint="raise max_size or check for stuck connections") from exc
    except psycopg.Error as exc:
        raise StorageError(f"{action}: {_first_line(exc)}") from exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else exc.__class__.__name__


class ConnectFailed(psycopg_pool.PoolTimeout):
    """No connection in time, and the pool's last attempt to open one failed: ``cause`` is
    that failure (``database "x" does not exist``, the server gone, a password refused),
    which otherwise only the pool's log would say."""

    def __init__(self, message: str, cause: str) -> None:
        super().__init__(f"{message}; the last attempt to connect failed: {cause}")
        self.cause = cause


class _Pool(psycopg_pool.ConnectionPool):
    """A pool that remembers why its last attempt to connect failed (cleared by the next one
    that succeeds), so a caller who waited in vain learns the cause, not only "no free
    connection". The attempts are seen through the pool's public ``connection_class``."""

    last_connect_error: str | None = None

    def getconn(self, timeout: float | None = None) -> Any:
        try:
            return super().getconn(timeout)
        except psycopg_pool.PoolTimeout as exc:
            cause = self.last_connect_error
            if cause is None or isinstance(exc, ConnectFailed):
                raise
            raise ConnectFailed(str(exc), cause) from exc


def _watched(pool: list[_Pool]) -> type[psycopg.Connection[Any]]:
    """A connection class whose ``connect`` tells ``pool[0]`` how each attempt went."""

    class Watched(psycopg.Connection[Any]):
        @classmethod
        def connect(cls, *args: Any, **kwargs: Any) -> Any:
            try:
                conn = super().connect(*args, **kwargs)
            except Exception as exc:
                if pool:
                    pool[0].last_connect_error = _first_line(exc)
                raise
            if pool:
                pool[0].last_connect_error = None
            return conn

    return Watched


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
    holder: list[_Pool] = []
    pool = _Pool(
        conninfo, connection_class=_watched(holder), min_size=min_size, max_size=max_size,
        timeout=timeout, configure=configure,
        check=psycopg_pool.ConnectionPool.check_connection, open=False, name="refold")
    holder.append(pool)
    with translate_errors("cannot connect to PostgreSQL"):
        try:
            pool.open(wait=True, timeout=timeout)
        except psycopg_pool.PoolTimeout as exc:
            if pool.last_connect_error is None:
                raise
            raise ConnectFailed(str(exc), pool.last_connect_error) from exc
    return pool


def connect(conninfo: str, *, timeout: float) -> psycopg.Connection[Any]:
    """A single autocommit connection (used to bootstrap the schema before the pool exists)."""
    with translate_errors("cannot connect to PostgreSQL"):
        return psycopg.connect(conninfo, autocommit=True, connect_timeout=max(1, int(timeout)))
