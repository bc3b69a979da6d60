"""A search reads its hits' sessions (title, lineage) through one covering index
(``sessions_card``, migration 19): on a cold cache each session costs one page, not its id's
index page and then its row's."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from refold.store.base import SearchQuery
from refold.store.sqlite.store import SQLiteStore


def _plans(path: str, statements: list[str]) -> list[str]:
    raw = sqlite3.connect(path)
    try:
        return [str(step[3]) for sql in statements
                for step in raw.execute("EXPLAIN QUERY PLAN " + sql).fetchall()]
    finally:
        raw.close()


@pytest.mark.parametrize("question", ["how big was the walrus budget?", "walrus budget"])
def test_a_search_reads_sessions_only_through_covering_indexes(
        tmp_path: Path, question: str) -> None:
    path = str(tmp_path / "refold.db")
    store = SQLiteStore(path)
    first = store.create_session(title="walrus budget review")
    for n in range(30):  # enough rows that the hits are read in two steps (``_load_ranked``)
        s = store.create_session(title=f"talk {n}")
        store.append_messages(s.id, [{"role": "user", "content": f"the walrus budget is {n}"},
                                     {"role": "assistant", "content": "noted"}])
    store.append_messages(first.id, [{"role": "user", "content": "walrus budget: 40 euros"}])
    fork = store.fork_session(first.id)
    store.catch_up_index()  # (indexing writes: not inside the read below)
    seen: list[str] = []
    with store.db.read() as conn:
        conn.set_trace_callback(seen.append)
        try:
            hits = store.search(SearchQuery(question, limit=5))
        finally:
            conn.set_trace_callback(None)
    # the title ranks first; the fork's copy folds into one hit naming both
    assert hits and (hits[0].session_title or "").startswith("walrus budget review")
    assert {hits[0].session_id, *hits[0].lineage} == {first.id, fork.id}
    asked = [s for s in seen if "sessions" in s and s.lstrip().upper().startswith(
        ("SELECT", "WITH"))]
    assert len(asked) >= 3  # the rows with their titles, the lineage, the titles
    plans = _plans(path, asked)
    on_sessions = [p for p in plans if " s " in f" {p} " or "sessions" in p]
    assert on_sessions and all("COVERING INDEX" in p for p in on_sessions), plans
    assert any("sessions_card" in p for p in plans)
    store.close()


def test_the_card_index_is_made_by_migration_19(tmp_path: Path) -> None:
    path = str(tmp_path / "refold.db")
    SQLiteStore(path).close()
    raw = sqlite3.connect(path)
    try:
        sql = raw.execute("SELECT sql FROM sqlite_master WHERE name = 'sessions_card'").fetchone()
        assert sql is not None and "id, title, parent_session_id, link_kind" in sql[0]
        assert raw.execute("SELECT name FROM schema_migrations WHERE version = 19").fetchone()
    finally:
        raw.close()
