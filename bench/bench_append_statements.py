"""What one durable append's SQL costs on refold's schema, statement by statement and index by index.

``refold serve`` commits twice a streamed turn (the request's new message once it is on its way
upstream, the reply before ``[DONE]``), each commit ``LedgerOps.append_messages``' statements:
``BEGIN IMMEDIATE``, the head ``SELECT`` (session, last checkpoint, last active message,
search watermark), the ``INSERT`` into ``messages`` (its indexes and insert trigger), the
``UPDATE`` of the session's counters, ``COMMIT``. This bench runs those very statements with raw
``sqlite3`` (no refold code on the timed path) on a database refold created (every migration),
WAL with ``synchronous=NORMAL`` as serve runs it, and reports CPU time per append
(``time.process_time``) against the baseline ``bench/proxy_ledger_floor.py`` stands for: one
``INSERT`` into a one-table database in its own transaction. Then, same run, each statement left
out in turn and each of ``messages``' secondary indexes dropped in turn (on a copy): what each
adds. Rounds alternate the variants, so a drift in the machine's speed lands on all of them;
the medians are printed.

    python bench/bench_append_statements.py [--appends 3000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from refold.store.sqlite.store import SQLiteStore

HEAD = ("SELECT s.last_seq, (SELECT id FROM checkpoints WHERE session_id = ?1 ORDER BY id DESC "
        "LIMIT 1), m.seq, m.identity, (SELECT indexed_through FROM search_index_state) FROM "
        "sessions s LEFT JOIN (SELECT seq, identity FROM messages WHERE session_id = ?1 AND "
        "active = 1 ORDER BY seq DESC LIMIT 1) m WHERE s.id = ?1")
INSERT = ("INSERT INTO messages (session_id, seq, role, message, text, tool_call_id, token_count, "
          "created_at, active, identity, has_cjk, spent) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?)")
UPDATE = "UPDATE sessions SET last_seq = ?, message_count = message_count + ? WHERE id = ?"
TEXT = "follow-up 7: and what did the test run print after the last change?"
MESSAGE = json.dumps({"role": "user", "content": TEXT})
INDEXES = ("messages_active_identity", "messages_created", "messages_opening",
           "messages_reply_start", "messages_cjk", "messages_rewind", "messages_inactive")


def connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


def refold_append(conn: sqlite3.Connection, session: str, skip: frozenset[str]
                  ) -> Callable[[int], None]:
    ids = itertools.count(1)

    def append(_: int) -> None:
        n = next(ids)
        conn.execute("BEGIN IMMEDIATE")
        if "head" in skip:
            seq = conn.execute("SELECT last_seq FROM sessions WHERE id = ?",
                               (session,)).fetchone()[0] + 1
        else:
            seq = conn.execute(HEAD, (session,)).fetchone()[0] + 1
        if "update" in skip:
            seq = n  # (the counters are not moved: the seq comes from here)
        if "insert" not in skip:
            conn.execute(INSERT, (session, seq, "user", MESSAGE, TEXT, None, 16, time.time(),
                                  f"{n * 7919:064x}", 0, None))
        if "update" not in skip:
            conn.execute(UPDATE, (seq, 1, session))
        conn.execute("COMMIT")

    return append


def bare_append(conn: sqlite3.Connection) -> Callable[[int], None]:
    def append(_: int) -> None:
        conn.execute("BEGIN")
        conn.execute("INSERT INTO messages (conversation, role, body, created) "
                     "VALUES (?, ?, ?, ?)", ("c", "user", MESSAGE, time.time()))
        conn.execute("COMMIT")

    return append


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--appends", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "refold.db"
        store = SQLiteStore(str(base))
        session = store.create_session(title="bench").id
        store.close()
        variants: dict[str, tuple[Path, tuple[str, ...], frozenset[str]]] = {
            "refold's append": (base, (), frozenset()),
            "  without the head SELECT (last_seq only)": (base, (), frozenset({"head"})),
            "  without the UPDATE of the session": (base, (), frozenset({"update"})),
            "  without the INSERT": (base, (), frozenset({"insert"})),
            "  BEGIN IMMEDIATE + COMMIT + last_seq": (
                base, (), frozenset({"head", "update", "insert"})),
            "  the insert trigger dropped": (base, ("DROP TRIGGER word_index_insert",),
                                              frozenset()),
            **{f"  index {name} dropped": (base, (f"DROP INDEX {name}",), frozenset())
               for name in INDEXES},
        }
        timings: dict[str, list[float]] = {name: [] for name in [*variants, "bare insert"]}
        for round_ in range(args.rounds):
            for name in timings:
                path = Path(tmp) / f"r{round_}-{len(timings[name])}-{abs(hash(name))}.db"
                if name == "bare insert":
                    conn = connect(path)
                    conn.execute("CREATE TABLE messages (id INTEGER PRIMARY KEY, conversation "
                                 "TEXT, role TEXT, body TEXT, created REAL)")
                    append = bare_append(conn)
                else:
                    source, ddl, skip = variants[name]
                    shutil.copy(source, path)
                    conn = connect(path)
                    for statement in ddl:
                        conn.execute(statement)
                    append = refold_append(conn, session, skip)
                start = time.process_time()
                for i in range(args.appends):
                    append(i)
                timings[name].append((time.process_time() - start) / args.appends * 1e6)
                conn.close()
        full = statistics.median(timings["refold's append"])
        print(f"CPU per append (µs, median of {args.rounds} rounds of {args.appends}; "
              "SQLite WAL, synchronous=NORMAL)")
        for name, values in timings.items():
            median = statistics.median(values)
            delta = "" if name in ("refold's append", "bare insert") else \
                f"   ({median - full:+.1f} against refold's append)"
            print(f"{name:48s} {median:7.1f}{delta}")
        print(f"refold's append / bare insert: {full / statistics.median(timings['bare insert']):.2f}x")


if __name__ == "__main__":
    main()
