"""The SQLite schema as ordered migrations, each applied in one transaction with its record.

Invariants:
- Migrations are applied in version order; each runs inside ``BEGIN IMMEDIATE`` together with
  the ``schema_migrations`` row that records it, so a crash leaves either all of it or none.
- Several processes opening a new database at once is safe: the applied set is re-read inside
  the write lock, so each migration runs exactly once.
- A database whose recorded version is newer than this code knows is refused (MigrationError).
- Never edit a released migration; add a new one.

Search indexes: ``messages_fts`` (porter + unicode61, external content = ``messages.text``) holds
every row; ``messages_trigram`` (trigram, contentless) holds only rows with CJK text
(``has_cjk = 1``). Since migration 7 rows are indexed in batches off the commit path, up to a
watermark that search brings up to date first (``indexer.py``); triggers keep deletes and text
rewrites of indexed rows in sync.
``messages_cjk_grams`` (migration 3) indexes CJK letters and letter pairs for 1–2 character
queries; it is maintained from Python (``grams.py``).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable

from refold._records import dataclass
from refold.errors import MigrationError
from refold.store.sqlite import cjklen, glued, grams, indexer, wordindex, wordrows
from refold.store.titles import untag_titles


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    statements: tuple[str, ...]
    # Python work after the statements, in the same transaction (e.g. filling a new index).
    backfill: Callable[[sqlite3.Connection], None] | None = None


_CORE = (
    """CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        title TEXT,
        parent_session_id TEXT REFERENCES sessions(id) ON DELETE SET NULL,
        link_kind TEXT,
        fork_seq INTEGER,
        source TEXT,
        model TEXT,
        owner TEXT NOT NULL DEFAULT '',
        started_at REAL NOT NULL,
        ended_at REAL,
        end_reason TEXT,
        message_count INTEGER NOT NULL DEFAULT 0,
        last_seq INTEGER NOT NULL DEFAULT 0,
        input_tokens INTEGER NOT NULL DEFAULT 0,
        output_tokens INTEGER NOT NULL DEFAULT 0,
        cache_read_tokens INTEGER NOT NULL DEFAULT 0,
        cost_usd REAL NOT NULL DEFAULT 0
    )""",
    "CREATE UNIQUE INDEX sessions_title ON sessions(title) WHERE title IS NOT NULL",
    "CREATE INDEX sessions_parent ON sessions(parent_session_id)",
    "CREATE INDEX sessions_started ON sessions(started_at)",
    "CREATE INDEX sessions_ended ON sessions(ended_at) WHERE ended_at IS NOT NULL",
    """CREATE TABLE messages (
        id INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        seq INTEGER NOT NULL,
        role TEXT NOT NULL,
        message TEXT NOT NULL,
        text TEXT NOT NULL DEFAULT '',
        tool_call_id TEXT,
        token_count INTEGER,
        created_at REAL NOT NULL,
        active INTEGER NOT NULL DEFAULT 1,
        identity TEXT NOT NULL,
        has_cjk INTEGER NOT NULL DEFAULT 0,
        rewind_id INTEGER,
        UNIQUE (session_id, seq)
    )""",
    # The safety net against duplicates: one active row per identity per session.
    """CREATE UNIQUE INDEX messages_active_identity
        ON messages(session_id, identity) WHERE active = 1""",
    "CREATE INDEX messages_cjk ON messages(id) WHERE has_cjk = 1",
    "CREATE INDEX messages_rewind ON messages(rewind_id) WHERE rewind_id IS NOT NULL",
    """CREATE TABLE checkpoints (
        id INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        summary TEXT NOT NULL,
        first_seq INTEGER NOT NULL,
        last_seq INTEGER NOT NULL,
        tail_start_seq INTEGER NOT NULL,
        anchors TEXT NOT NULL DEFAULT '[]',
        tokens_before INTEGER NOT NULL DEFAULT 0,
        tokens_after INTEGER NOT NULL DEFAULT 0,
        summarizer TEXT NOT NULL,
        status TEXT NOT NULL,
        summary_role TEXT NOT NULL,
        details TEXT NOT NULL DEFAULT '{}',
        created_at REAL NOT NULL
    )""",
    "CREATE INDEX checkpoints_session ON checkpoints(session_id, id)",
    """CREATE TABLE rewinds (
        id INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        from_seq INTEGER NOT NULL,
        count INTEGER NOT NULL,
        created_at REAL NOT NULL,
        undone INTEGER NOT NULL DEFAULT 0
    )""",
    "CREATE INDEX rewinds_session ON rewinds(session_id)",
    """CREATE TABLE events (
        id INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        kind TEXT NOT NULL,
        payload TEXT NOT NULL,
        created_at REAL NOT NULL
    )""",
    "CREATE INDEX events_session ON events(session_id, kind, id)",
    """CREATE TABLE leases (
        name TEXT PRIMARY KEY,
        holder TEXT NOT NULL,
        expires_at REAL NOT NULL
    )""",
    """CREATE TABLE memory (
        profile TEXT NOT NULL,
        target TEXT NOT NULL,
        version INTEGER NOT NULL,
        rows TEXT NOT NULL,
        updated_at REAL NOT NULL,
        PRIMARY KEY (profile, target)
    )""",
)

_SEARCH = (
    """CREATE VIRTUAL TABLE messages_fts USING fts5(
        text, content='messages', content_rowid='id',
        tokenize='porter unicode61 remove_diacritics 2')""",
    # Contentless: only CJK rows are indexed, and the text is read from ``messages``.
    "CREATE VIRTUAL TABLE messages_trigram USING fts5(text, content='', tokenize='trigram')",
    """CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
        INSERT INTO messages_fts(rowid, text) VALUES (new.id, new.text);
        INSERT INTO messages_trigram(rowid, text) SELECT new.id, new.text WHERE new.has_cjk = 1;
    END""",
    """CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
        INSERT INTO messages_fts(messages_fts, rowid, text) VALUES ('delete', old.id, old.text);
        INSERT INTO messages_trigram(messages_trigram, rowid, text)
            SELECT 'delete', old.id, old.text WHERE old.has_cjk = 1;
    END""",
    """CREATE TRIGGER messages_fts_update AFTER UPDATE OF text, has_cjk ON messages BEGIN
        INSERT INTO messages_fts(messages_fts, rowid, text) VALUES ('delete', old.id, old.text);
        INSERT INTO messages_trigram(messages_trigram, rowid, text)
            SELECT 'delete', old.id, old.text WHERE old.has_cjk = 1;
        INSERT INTO messages_fts(rowid, text) VALUES (new.id, new.text);
        INSERT INTO messages_trigram(rowid, text) SELECT new.id, new.text WHERE new.has_cjk = 1;
    END""",
)

# One vector per message and model (float16 blobs), filled off the append path (vectors.py).
_VECTORS = ("CREATE TABLE message_vectors (id INTEGER PRIMARY KEY REFERENCES messages(id) "
            "ON DELETE CASCADE, model TEXT NOT NULL, vec BLOB NOT NULL)",)


def _seal_cjk_blocks(conn: sqlite3.Connection) -> None:
    cjklen.seal_blocks(conn)


def _untag_titles(conn: sqlite3.Connection) -> None:
    untag_titles(conn, "?")


# Titles are unique per owner: a tenant's names are its own, found by that name, and one
# tenant cannot take (or learn about) another's.
_OWNER_TITLES = (
    "DROP INDEX IF EXISTS sessions_title",
    "CREATE UNIQUE INDEX sessions_owner_title ON sessions(owner, title) WHERE title IS NOT NULL",
)

MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "core ledger tables", _CORE),
    Migration(2, "full-text search indexes and their triggers", _SEARCH),
    Migration(3, "CJK unigram and bigram index for 1-2 character queries", (grams.CREATE,),
              grams.backfill),
    Migration(4, "message vectors for vector and hybrid search", _VECTORS),
    Migration(5, "session titles unique per owner; tenant tags removed", _OWNER_TITLES,
              _untag_titles),
    # a lease names the process that took it, so a killed holder's lease lapses at once
    Migration(6, "lease holder process", (
        "ALTER TABLE leases ADD COLUMN host TEXT",
        "ALTER TABLE leases ADD COLUMN pid INTEGER",
        "ALTER TABLE leases ADD COLUMN pid_started TEXT",
    )),
    # appends no longer index inside their commit; a watermark says what the indexes hold
    Migration(7, "search indexing off the commit path (watermark)", indexer.MIGRATION),
    # a day a question names ranks the messages created that day (refold.search.dates)
    Migration(8, "messages by creation time", (
        "CREATE INDEX IF NOT EXISTS messages_created ON messages(created_at)",)),
    # sentence queries scored from postings NumPy reads at once (wordindex.py)
    Migration(9, "word impact index", wordindex.MIGRATION),
    # CJK postings weighed by length without reading the message rows (cjklen.py)
    Migration(10, "CJK message lengths", cjklen.MIGRATION),
    # the rewound rows among a search's candidates, without reading each candidate's row
    Migration(11, "inactive messages by id", (
        "CREATE INDEX IF NOT EXISTS messages_inactive ON messages(id) WHERE active = 0",)),
    # what the session's totals hold for a row an import stored with its usage
    # (store.base.encode_spent): a re-import that rewinds or keeps it corrects them
    Migration(12, "usage each imported message holds of its session's totals", (
        "ALTER TABLE messages ADD COLUMN spent TEXT",)),
    # the sessions whose replies a client's sliding window re-sends (refold.runtime.window):
    # assistant rows by the start of their search text (REPLY_KEY_CHARS), of no other role
    Migration(13, "assistant messages by the start of their text", (
        "CREATE INDEX IF NOT EXISTS messages_reply_start ON messages(substr(text, 1, 128)) "
        "WHERE role = 'assistant'",)),
    # the rows above the sealed chunks sealed in small blocks (wordindex.RECENT_MIGRATION)
    Migration(14, "word index recent blocks", wordindex.RECENT_MIGRATION),
    # the words CJK messages hold glued to their text, so a question skips the lookup of the
    # others (glued.py)
    Migration(15, "words glued to CJK text", glued.MIGRATION, glued.backfill),
    # the sessions a conversation's opening message starts (Store.sessions_opening_with): where
    # a transcript without an id of its own is stored already (an export imported back)
    Migration(16, "sessions by their first message", (
        "CREATE INDEX IF NOT EXISTS messages_opening ON messages(identity) WHERE seq = 1",)),
    # the sessions an agent's own conversation id was noted on (Store.sessions_of_agent): its
    # side calls and its continuations after its own compaction are linked to them
    Migration(17, "sessions by their agent's conversation id", (
        "CREATE INDEX IF NOT EXISTS events_agent ON events(payload) "
        "WHERE kind IN ('agent', 'agent-side', 'agent-subagent')",)),
    # the word index's postings rows by term number and chunk in a rowid table, out of the
    # WITHOUT ROWID table whose seeks read big rows' overflow pages (wordrows.py)
    Migration(18, "word index rows by term number", wordrows.MIGRATION),
    # what a search reads of its hits' sessions (the title, the lineage) from one index: each
    # session one lookup, not its id's index and then its row (search.py, CARD)
    Migration(19, "sessions by id with their title and lineage", (
        "CREATE INDEX IF NOT EXISTS sessions_card "
        "ON sessions(id, title, parent_session_id, link_kind)",)),
    # CJK lengths packed a block of ids a row, read in C for a common character's postings
    # (cjklen.py)
    Migration(20, "CJK lengths in packed blocks", cjklen.BLOCKS_MIGRATION, _seal_cjk_blocks),
    # a question naming a day weighs each of its active messages by length: read from the
    # index, not from each row (natural.day_scores: a crowded day's text pages)
    Migration(21, "messages by creation time with their length", (
        "DROP INDEX IF EXISTS messages_created",
        "CREATE INDEX messages_created ON messages(created_at, length(text), active)",)),
)
LATEST_VERSION = MIGRATIONS[-1].version


def applied_versions(conn: sqlite3.Connection) -> set[int]:
    rows = conn.execute("SELECT version FROM schema_migrations").fetchall()
    return {int(r[0]) for r in rows}


def migrate(conn: sqlite3.Connection, migrations: tuple[Migration, ...] = MIGRATIONS) -> list[int]:
    """Bring the schema up to date; returns the versions applied now. Autocommit connection."""
    try:
        conn.execute("""CREATE TABLE IF NOT EXISTS schema_migrations (
            version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)""")
        done = applied_versions(conn)
    except sqlite3.Error as exc:
        raise MigrationError(f"cannot read the schema version: {exc}") from exc
    known = {m.version for m in migrations}
    if done - known and max(done) > max(known):
        raise MigrationError(
            f"the database has schema version {max(done)}, newer than this refold knows "
            f"({max(known)})", hint="upgrade refold")
    applied: list[int] = []
    for migration in sorted(migrations, key=lambda m: m.version):
        if migration.version in done:
            continue
        if _apply(conn, migration):
            applied.append(migration.version)
    return applied


def _apply(conn: sqlite3.Connection, migration: Migration) -> bool:
    try:
        conn.execute("BEGIN IMMEDIATE")
        if migration.version in applied_versions(conn):  # another process got there first
            conn.execute("COMMIT")
            return False
        for statement in migration.statements:
            conn.execute(statement)
        if migration.backfill is not None:
            migration.backfill(conn)
        conn.execute("INSERT INTO schema_migrations(version, name, applied_at) VALUES (?, ?, ?)",
                     (migration.version, migration.name, time.time()))
        conn.execute("COMMIT")
        return True
    except sqlite3.Error as exc:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise MigrationError(
            f"migration {migration.version} ({migration.name}) failed: {exc}") from exc
