"""What the readers of other agents' session databases share (``hermes_state``, ``opencode_db``).

``AgentSession`` is one session such a database holds, as said. ``read_only(path, schema,
read)`` opens the SQLite file read-only (the agent may be running; a write it has not
committed is not seen, and nothing here writes), checks that it has the agent's tables, and
turns any SQLite failure into one ``InvalidInput`` naming the file and the agent.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any, TypeVar

from refold._records import dataclass, field
from refold.errors import InvalidInput
from refold.messages.agent_logs import Spend
from refold.messages.model import Message

SQLITE_HEADER = b"SQLite format 3\x00"
T = TypeVar("T")
Schema = dict[str, set[str]]  # table -> the columns it must have


@dataclass
class AgentSession:
    """One session an agent's database holds, as said: its messages (OpenAI form, validated),
    when each was said, what was left out by kind, and what its model calls used — the
    session's own totals (``totals``: input/output/cache-read tokens, cost_usd), or each
    message's calls (``spend``: (usage, model) pairs, priced as refold prices replies)."""

    native_id: str
    source: str | None
    model: str | None
    title: str | None
    started_at: float | None
    parent_id: str | None  # the session it continues, when it is a rotation or branch
    link_kind: str | None  # "compaction" | "branch" | None
    messages: list[Message] = field(default_factory=list)
    times: list[float | None] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    totals: dict[str, Any] = field(default_factory=dict)
    spend: list[list[Spend]] | None = None


def is_sqlite(path: str | Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(16) == SQLITE_HEADER
    except OSError:
        return False


def holds(path: str | Path, schema: Schema) -> bool:
    """True when ``path`` is a SQLite file with ``schema``'s tables and columns."""
    try:
        if not is_sqlite(path):
            return False
        with closing(_connect(path)) as conn:
            return _has(conn, schema)
    except (OSError, sqlite3.Error, InvalidInput):
        return False


def read_only(path: str | Path, schema: Schema, agent: str, where: str,
              read: Callable[[sqlite3.Connection], T]) -> T:
    """``read(conn)`` on the database at ``path`` opened read-only, once it shows ``schema``."""
    try:
        with closing(_connect(path)) as conn:
            if not _has(conn, schema):
                raise sqlite3.DatabaseError(f"it has no {agent} tables "
                                            f"({', '.join(sorted(schema))})")
            return read(conn)
    except sqlite3.Error as exc:
        raise InvalidInput(f"{path}: cannot read it as {agent}'s session database: {exc}",
                           hint=f"is it {where}? It is only read, never written") from None


def columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {str(r[1]) for r in conn.execute(f"PRAGMA table_info({table})")}


def _has(conn: sqlite3.Connection, schema: Schema) -> bool:
    return all(columns(conn, table) >= wanted for table, wanted in schema.items())


def _connect(path: str | Path) -> sqlite3.Connection:
    resolved = Path(path).expanduser().resolve()
    if not resolved.is_file():
        raise InvalidInput(f"{path}: no such file")
    conn = sqlite3.connect(f"{resolved.as_uri()}?mode=ro", uri=True, timeout=5.0)
    conn.row_factory = sqlite3.Row
    return conn


__all__ = ["AgentSession", "columns", "holds", "is_sqlite", "read_only"]
