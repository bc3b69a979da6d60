"""Ordered schema migrations for the PostgreSQL store, safe when several processes open at once.

Invariants:
- Migrations are applied in version order, each in ONE transaction together with its row in
  ``schema_migrations``: a crash leaves the schema at a whole version, never between two.
- Opening is serialized per schema by a session-level advisory lock, so N processes starting at
  once run each migration exactly once; the others wait, then see it applied.
- A schema already at this code's version is opened without DDL or lock: a role with USAGE on
  the schema and privileges on its tables (no CREATE) reads and writes it.
- A schema is refold's by its tables' columns (``holds_refold``), never by the mere name
  ``schema_migrations``, which Rails, golang-migrate and Ecto use too.
- ``pg_trgm`` and ``unaccent`` are created once per database (an advisory lock each plus
  "already exists" handled), in ``public`` unless they already live elsewhere; the store's
  search_path then includes those schemas, so dropping a test schema never drops an extension
  other schemas use.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

from refold._records import dataclass
from refold.errors import MigrationError
from refold.store.postgres.codec import cjk_gram_list
from refold.store.titles import untag_titles

log = logging.getLogger(__name__)


Backfill = Callable[[psycopg.Connection[Any]], None]


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    statements: tuple[str, ...]
    backfill: Backfill | None = None  # Python step run in the same transaction, after the SQL


def _backfill_cjk_grams(conn: psycopg.Connection[Any]) -> None:
    """Compute ``cjk_grams`` for rows written before the column existed (Python-side grams)."""
    with conn.cursor(name="refold_grams_backfill") as rows, conn.cursor() as out:
        rows.execute("SELECT id, search_text FROM messages WHERE cjk_grams IS NULL")
        while batch := rows.fetchmany(2000):
            out.executemany("UPDATE messages SET cjk_grams = %s WHERE id = %s",
                            [(grams, row_id) for row_id, text in batch
                             if (grams := cjk_gram_list(text))])


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "ledger", (
        """CREATE TABLE sessions (
            id text PRIMARY KEY,
            title text,
            parent_session_id text REFERENCES sessions(id) ON DELETE SET NULL,
            link_kind text,
            source text,
            model text,
            owner text NOT NULL DEFAULT '',
            started_at double precision NOT NULL,
            ended_at double precision,
            end_reason text,
            message_count integer NOT NULL DEFAULT 0,
            input_tokens bigint NOT NULL DEFAULT 0,
            output_tokens bigint NOT NULL DEFAULT 0,
            cache_read_tokens bigint NOT NULL DEFAULT 0,
            cost_usd double precision NOT NULL DEFAULT 0,
            fork_seq integer
        )""",
        "CREATE UNIQUE INDEX sessions_title ON sessions (title) WHERE title IS NOT NULL",
        "CREATE INDEX sessions_parent ON sessions (parent_session_id)",
        "CREATE INDEX sessions_started ON sessions (started_at DESC)",
        "CREATE INDEX sessions_id_pattern ON sessions (id text_pattern_ops)",
        # Like SQLite's porter + unicode61: the original Porter stemmer and no stop words,
        # so both backends stem alike ("deployments" ~ "deployment", not "deploy").
        "CREATE TEXT SEARCH DICTIONARY refold_porter (TEMPLATE = snowball, Language = porter)",
        "CREATE TEXT SEARCH CONFIGURATION refold_search (COPY = simple)",
        """ALTER TEXT SEARCH CONFIGURATION refold_search ALTER MAPPING FOR asciiword, word,
            numword, asciihword, hword, numhword, hword_asciipart, hword_part, hword_numpart
            WITH refold_porter""",
        """CREATE TABLE messages (
            id bigserial PRIMARY KEY,
            session_id text NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            seq integer NOT NULL,
            role text NOT NULL,
            body text NOT NULL,
            identity text NOT NULL,
            token_count integer,
            created_at double precision NOT NULL,
            active boolean NOT NULL DEFAULT true,
            rewind_id bigint,
            search_text text NOT NULL,
            -- Punctuation becomes space (as in SQLite's unicode61), so dotted.names and
            -- hyphen-ated words index as separate words; very long texts index their start.
            tsv tsvector GENERATED ALWAYS AS (to_tsvector('refold_search'::regconfig,
                regexp_replace(left(search_text, 200000), '[^[:alnum:][:space:]]+', ' ', 'g')))
                STORED
        )""",
        "CREATE UNIQUE INDEX messages_seq ON messages (session_id, seq)",
        "CREATE UNIQUE INDEX messages_identity ON messages (session_id, identity) WHERE active",
        "CREATE INDEX messages_created ON messages (created_at)",
        "CREATE INDEX messages_tsv ON messages USING gin (tsv)",
        "CREATE INDEX messages_trgm ON messages USING gin (search_text gin_trgm_ops)",
        """CREATE TABLE checkpoints (
            id bigserial PRIMARY KEY,
            session_id text NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            summary_json text NOT NULL,
            first_seq integer NOT NULL,
            last_seq integer NOT NULL,
            tail_start_seq integer NOT NULL,
            anchors_json text NOT NULL DEFAULT '[]',
            tokens_before integer NOT NULL DEFAULT 0,
            tokens_after integer NOT NULL DEFAULT 0,
            summarizer text NOT NULL,
            status text NOT NULL,
            summary_role text NOT NULL,
            details_json text NOT NULL DEFAULT '{}',
            created_at double precision NOT NULL
        )""",
        "CREATE INDEX checkpoints_session ON checkpoints (session_id, id)",
        """CREATE TABLE rewinds (
            id bigserial PRIMARY KEY,
            session_id text NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            from_seq integer NOT NULL,
            count integer NOT NULL,
            created_at double precision NOT NULL,
            undone boolean NOT NULL DEFAULT false
        )""",
        "CREATE INDEX rewinds_session ON rewinds (session_id)",
        """CREATE TABLE events (
            id bigserial PRIMARY KEY,
            session_id text NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            kind text NOT NULL,
            payload_json text NOT NULL,
            created_at double precision NOT NULL
        )""",
        "CREATE INDEX events_session ON events (session_id, kind, id)",
        """CREATE TABLE leases (
            name text PRIMARY KEY,
            holder text NOT NULL,
            expires_at timestamptz NOT NULL
        )""",
        """CREATE TABLE memory_docs (
            profile text NOT NULL,
            target text NOT NULL,
            version integer NOT NULL,
            rows_json text NOT NULL,
            updated_at double precision NOT NULL,
            PRIMARY KEY (profile, target)
        )""",
    )),
)

MIGRATIONS += (
    # 1–2 letter CJK queries: a GIN index over each message's CJK unigrams and bigrams answers
    # them exactly, where a trigram index cannot (the same grams SQLite's gram index holds).
    Migration(2, "cjk grams", (
        "ALTER TABLE messages ADD COLUMN cjk_grams text[]",
        "CREATE INDEX messages_grams ON messages USING gin (cjk_grams) "
        "WHERE cjk_grams IS NOT NULL",
    ), backfill=_backfill_cjk_grams),
)

MIGRATIONS += (
    # Accents fold as in SQLite's ``remove_diacritics 2``: "cafe" finds "café", "Zurich" finds
    # "Zürich". ``unaccent`` filters each non-ASCII word before the stemmer; rows written before
    # get their stored tsvector recomputed (an UPDATE recomputes a generated column).
    Migration(3, "accent folding", (
        """ALTER TEXT SEARCH CONFIGURATION refold_search ALTER MAPPING FOR word, hword,
            hword_part WITH unaccent, refold_porter""",
        "UPDATE messages SET search_text = search_text "
        "WHERE octet_length(search_text) <> char_length(search_text)",
    )),
)

MIGRATIONS += (
    # One vector per message and model (float16 bytes), filled off the append path (vectors.py).
    Migration(4, "message vectors", (
        """CREATE TABLE message_vectors (
               id bigint PRIMARY KEY REFERENCES messages(id) ON DELETE CASCADE,
               model text NOT NULL, vec bytea NOT NULL)""",
    )),
)


def _untag_titles(conn: psycopg.Connection[Any]) -> None:
    untag_titles(conn, "%s")


MIGRATIONS += (
    # Titles are unique per owner: a tenant's names are its own, found by that name, and one
    # tenant cannot take (or learn about) another's.
    Migration(5, "session titles unique per owner; tenant tags removed", (
        "DROP INDEX IF EXISTS sessions_title",
        "CREATE UNIQUE INDEX sessions_owner_title ON sessions (owner, title) "
        "WHERE title IS NOT NULL",
    ), backfill=_untag_titles),
)

MIGRATIONS += (
    # a lease names the database connection that took it (pid and start of its backend), so
    # the lease lapses as soon as that connection is gone: a killed holder blocks nobody
    Migration(6, "lease holder connection", (
        "ALTER TABLE leases ADD COLUMN backend_pid integer",
        "ALTER TABLE leases ADD COLUMN backend_start timestamptz",
    )),
)

def _backfill_glued_words(conn: psycopg.Connection[Any]) -> None:
    """Add the glued ASCII words (``~pytest``) to the grams of CJK rows written before."""
    with conn.cursor(name="refold_glued_backfill") as rows, conn.cursor() as out:
        rows.execute("SELECT id, search_text, cjk_grams FROM messages "
                     "WHERE cjk_grams IS NOT NULL")
        while batch := rows.fetchmany(2000):
            out.executemany("UPDATE messages SET cjk_grams = %s WHERE id = %s",
                            [(grams, row_id) for row_id, text, old in batch
                             if (grams := cjk_gram_list(text)) != old])


MIGRATIONS += (
    # ASCII words glued to CJK text (用pytest跑, 端口是5433) are one token of the tsvector; each
    # CJK row's grams also hold them as "~word", so a query word finds them through the grams'
    # GIN index (refold.search.natural.glued_words)
    Migration(7, "glued words among the CJK grams", (), backfill=_backfill_glued_words),
)

MIGRATIONS += (
    # what the session's totals hold for a row an import stored with its usage
    # (store.base.encode_spent): a re-import that rewinds or keeps it corrects them
    Migration(8, "usage each imported message holds of its session's totals", (
        "ALTER TABLE messages ADD COLUMN IF NOT EXISTS spent text",)),
    # the sessions whose replies a client's sliding window re-sends (refold.runtime.window):
    # assistant rows by the start of their search text (REPLY_KEY_CHARS), of no other role
    Migration(9, "assistant messages by the start of their text", (
        "CREATE INDEX IF NOT EXISTS messages_reply_start ON messages (left(search_text, 128)) "
        "WHERE role = 'assistant'",)),
    # the sessions a conversation's opening message starts (Store.sessions_opening_with): where
    # a transcript without an id of its own is stored already (an export imported back)
    Migration(10, "sessions by their first message", (
        "CREATE INDEX IF NOT EXISTS messages_opening ON messages (identity) WHERE seq = 1",)),
    # the sessions an agent's own conversation id was noted on (Store.sessions_of_agent): its
    # side calls and its continuations after its own compaction are linked to them
    Migration(11, "sessions by their agent's conversation id", (
        "CREATE INDEX IF NOT EXISTS events_agent ON events (payload_json) "
        "WHERE kind IN ('agent', 'agent-side', 'agent-subagent')",)),
)

LATEST_VERSION = MIGRATIONS[-1].version


def _lock_key(conn: psycopg.Connection[Any], name: str) -> int:
    row = conn.execute("SELECT hashtext(%s)", (name,)).fetchone()
    assert row is not None
    return int(row[0])


EXTENSIONS = ("pg_trgm", "unaccent")  # both ship in postgresql-contrib; trusted since PG 13


def ensure_extension(conn: psycopg.Connection[Any], name: str) -> str:
    """Create extension ``name`` if missing (once per database) and return its schema."""
    assert name in EXTENSIONS  # a constant, never user input
    key = _lock_key(conn, f"refold:extension:{name}")
    conn.execute("SELECT pg_advisory_lock(%s)", (key,))
    try:
        query = ("SELECT extnamespace::regnamespace::text FROM pg_extension "
                 "WHERE extname = %s")
        row = conn.execute(query, (name,)).fetchone()
        if row is None:
            # Another database user may create it between our check and CREATE.
            with contextlib.suppress(psycopg.errors.UniqueViolation,
                                     psycopg.errors.DuplicateObject):
                try:
                    conn.execute(sql.SQL("CREATE EXTENSION IF NOT EXISTS {} SCHEMA public")
                                 .format(sql.Identifier(name)))
                except psycopg.errors.InsufficientPrivilege as exc:
                    raise MigrationError(
                        f"not allowed to create the {name} extension",
                        hint=f"ask a database owner to run: CREATE EXTENSION {name}") from exc
            row = conn.execute(query, (name,)).fetchone()
        if row is None:
            raise MigrationError(f"the {name} extension is not available",
                                 hint="install postgresql-contrib or ask an admin to "
                                      f"CREATE EXTENSION {name}")
        return str(row[0]).strip('"')
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", (key,))


def ensure_trigram_extension(conn: psycopg.Connection[Any]) -> str:
    """Create ``pg_trgm`` if missing and return the schema it lives in."""
    return ensure_extension(conn, "pg_trgm")


def extension_schemas(conn: psycopg.Connection[Any]) -> list[str]:
    """Every extension refold needs, created if missing: their schemas, each once."""
    out: list[str] = []
    for name in EXTENSIONS:
        schema = ensure_extension(conn, name)
        if schema not in out:
            out.append(schema)
    return out


# refold's own tables and the columns that tell them from another app's tables of the same name
# (Rails, golang-migrate and Ecto each keep a ``schema_migrations`` of their own in ``public``)
REFOLD_COLUMNS: dict[str, dict[str, str]] = {
    "schema_migrations": {"version": "integer", "name": "text",
                          "applied_at": "double precision"},
    "sessions": {"id": "text", "owner": "text", "started_at": "double precision",
                 "message_count": "integer", "parent_session_id": "text"},
    "messages": {"session_id": "text", "seq": "integer", "body": "text", "identity": "text",
                 "search_text": "text"},
}


def table_columns(conn: psycopg.Connection[Any], schema: str) -> dict[str, dict[str, str]]:
    """``{table: {column: type}}`` of the tables named in ``REFOLD_COLUMNS`` that ``schema``
    holds. Read from the catalogs, which any role may read (no privilege on the tables)."""
    rows = conn.execute(
        """SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod)
           FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
           JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
           WHERE n.nspname = %s AND c.relkind IN ('r', 'p') AND c.relname = ANY(%s)""",
        (schema, list(REFOLD_COLUMNS))).fetchall()
    out: dict[str, dict[str, str]] = {}
    for table, column, kind in rows:
        out.setdefault(table, {})[column] = kind
    return out


def _is_refold_table(columns: dict[str, dict[str, str]], table: str) -> bool:
    have = columns.get(table)
    return have is not None and all(have.get(c) == t for c, t in REFOLD_COLUMNS[table].items())


def holds_refold(conn: psycopg.Connection[Any], schema: str) -> bool:
    """Whether ``schema`` holds a refold store: refold's migrations table with its sessions and
    messages tables, each with refold's columns (never just some table called
    ``schema_migrations``)."""
    columns = table_columns(conn, schema)
    return all(_is_refold_table(columns, table) for table in REFOLD_COLUMNS)


def _schema_exists(conn: psycopg.Connection[Any], schema: str) -> bool:
    return conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s",
                        (schema,)).fetchone() is not None


def _current_version(conn: psycopg.Connection[Any], schema: str) -> int | None:
    """The version ``schema`` is at; None where it has no migrations table yet. MigrationError
    when its ``schema_migrations`` is another app's."""
    columns = table_columns(conn, schema)
    if "schema_migrations" not in columns:
        return None
    if not _is_refold_table(columns, "schema_migrations"):
        raise MigrationError(
            f"schema {schema!r} holds a schema_migrations table that is not refold's",
            hint="give refold a schema of its own: add ?schema=refold to the URL")
    table = sql.SQL("{}.schema_migrations").format(sql.Identifier(schema))
    row = conn.execute(sql.SQL("SELECT coalesce(max(version), 0) FROM {}").format(table))\
        .fetchone()
    return int(row[0]) if row else 0


def _ddl(conn: psycopg.Connection[Any], statement: sql.Composed, schema: str) -> None:
    """Run one statement of the schema's creation; a role without the privilege gets a
    MigrationError that names it."""
    try:
        conn.execute(statement)
    except psycopg.errors.InsufficientPrivilege as exc:
        raise MigrationError(
            f"cannot create refold's tables in schema {schema!r}: "
            f"{str(exc).strip().splitlines()[0]}",
            hint="open it once as a role with CREATE on the database (or the schema), "
                 "e.g. its owner; after that a role with USAGE and table privileges is "
                 "enough") from exc


def migrate(conn: psycopg.Connection[Any], schema: str, search_path: list[str],
            migrations: tuple[Migration, ...] = MIGRATIONS) -> list[int]:
    """Bring ``schema`` to the last of ``migrations``; return the versions applied by this call.

    A schema already at that version takes no DDL at all (nor a lock), so a role with only
    USAGE on the schema and privileges on its tables opens it; only a schema to create or to
    migrate needs CREATE."""
    latest = max(m.version for m in migrations)
    path = sql.SQL(", ").join(sql.Identifier(s) for s in search_path)
    current = _current_version(conn, schema)
    if current is not None and current >= latest:
        _check_not_newer(schema, current, latest)
        conn.execute(sql.SQL("SET search_path TO {}").format(path))
        return []
    key = _lock_key(conn, f"refold:migrate:{schema}")
    conn.execute("SELECT pg_advisory_lock(%s)", (key,))
    try:
        if not _schema_exists(conn, schema):
            _ddl(conn, sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)),
                 schema)
        conn.execute(sql.SQL("SET search_path TO {}").format(path))
        current = _current_version(conn, schema)  # another process may have migrated meanwhile
        if current is None:
            _ddl(conn, sql.SQL("""CREATE TABLE IF NOT EXISTS {}.schema_migrations (
                                    version integer PRIMARY KEY,
                                    name text NOT NULL,
                                    applied_at double precision NOT NULL)""").format(
                     sql.Identifier(schema)), schema)
            current = 0
        _check_not_newer(schema, current, latest)
        applied: list[int] = []
        for migration in migrations:
            if migration.version > current:
                _apply(conn, migration)
                applied.append(migration.version)
        return applied
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", (key,))


def _check_not_newer(schema: str, current: int, latest: int) -> None:
    if current > latest:
        raise MigrationError(f"schema {schema!r} is at version {current}, newer than this "
                             f"refold ({latest})", hint="upgrade refold")


def _apply(conn: psycopg.Connection[Any], migration: Migration) -> None:
    log.info("applying migration %d (%s)", migration.version, migration.name)
    try:
        with conn.transaction():
            for statement in migration.statements:
                conn.execute(statement.encode())  # trusted constant SQL
            if migration.backfill is not None:
                migration.backfill(conn)
            conn.execute("INSERT INTO schema_migrations (version, name, applied_at) "
                         "VALUES (%s, %s, %s)", (migration.version, migration.name, time.time()))
    except psycopg.Error as exc:
        raise MigrationError(f"migration {migration.version} ({migration.name}) failed: "
                             f"{str(exc).strip().splitlines()[0]}") from exc
