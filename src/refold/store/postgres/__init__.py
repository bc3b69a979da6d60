"""The PostgreSQL backend of the ``Store`` Protocol (psycopg 3 with a connection pool).

``PostgresStore(url, schema=…)`` keeps the same semantics as the SQLite store, for deployments
where several gateway hosts share one database. The store is assembled from mixins, one module
per concern: ``sessions`` (sessions and lineage), ``ledger`` (messages, rewind, fork,
checkpoints, events), ``search``, ``coordination`` (leases, memory documents), ``bulk`` (import for ``refold migrate``) over ``core``
(pool, transactions, error translation). Only this package imports psycopg.
"""

from __future__ import annotations

from refold.store.postgres.bulk import BulkMixin
from refold.store.postgres.coordination import CoordinationMixin
from refold.store.postgres.search import SearchMixin
from refold.store.postgres.sessions import SessionsMixin
from refold.store.postgres.vectors import VectorsMixin


class PostgresStore(SessionsMixin, SearchMixin, VectorsMixin, CoordinationMixin, BulkMixin):
    """A ``Store`` on PostgreSQL. ``schema`` (or ``?schema=`` in the URL) isolates a tenant or a
    test; ``min_size``/``max_size`` size the pool; ``timeout`` bounds connecting and waiting for
    a pooled connection."""


__all__ = ["PostgresStore"]
