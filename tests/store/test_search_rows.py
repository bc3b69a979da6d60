"""A search reads the rows of the hits it returns, not every candidate it ranked, when the rest
cannot change the hits (``SearchOps._load_ranked``): no copy of a hit among them (copies of one
lineage score alike), no session title bringing one forward. The hits are those of reading them
all: ids, order, scores, lineages, titles first."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from refold.store.base import SearchHit, SearchQuery
from refold.store.sqlite import search
from refold.store.sqlite.store import SQLiteStore

LOAD = re.compile(r"SELECT m\.id, m\.session_id, m\.seq, m\.role, m\.text.* IN \(([^)]*)\)")


def rows_read(store: SQLiteStore, query: SearchQuery) -> tuple[list[SearchHit], int]:
    """The hits of ``query`` and how many message rows were read to load them."""
    statements: list[str] = []
    traced: list[sqlite3.Connection] = []
    take = store.db._take_reader

    def tracing() -> sqlite3.Connection:
        conn = take()
        conn.set_trace_callback(statements.append)
        traced.append(conn)
        return conn

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(store.db, "_take_reader", tracing)
        try:
            hits = store.search(query)
        finally:
            for conn in traced:
                conn.set_trace_callback(None)
    assert traced
    return hits, sum(found.group(1).count(",") + 1 for s in statements
                     if (found := LOAD.search(s)) is not None)


def every_row(store: SQLiteStore, query: SearchQuery, monkeypatch: pytest.MonkeyPatch
              ) -> list[SearchHit]:
    """The hits when every ranked row is read (as before ``_load_ranked`` spared any)."""
    real = search.SearchOps._load_ranked
    with monkeypatch.context() as patch:
        patch.setattr(search.SearchOps, "_load_ranked",
                      lambda self, conn, parsed, ranked, snippet, enough:
                      real(self, conn, parsed, ranked, snippet, None))
        return store.search(query)


ACTIONS = ["deploy", "release", "rollout", "ship", "push"]
OUTCOMES = ["failed", "went slowly", "host down", "passed", "retried", "host up again", "stalled"]


@pytest.fixture
def store(tmp_path: Path) -> SQLiteStore:
    """Six sessions of forty messages; messages alike but for their session's machine tie."""
    store = SQLiteStore(str(tmp_path / "refold.db"))
    for n in range(6):
        session = store.create_session(title=f"notes {n}")
        store.append_messages(session.id, [
            {"role": "user", "content": f"the {ACTIONS[i % 5]} {OUTCOMES[i % 7]} for build {i} "
                                        f"on machine {n}"} for i in range(40)])
    return store


QUERIES = ["why did the deploy fail", "deploy", "host went slowly", "what stalled on machine 3"]


def test_only_the_returned_hits_rows_are_read(store: SQLiteStore,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    for text in QUERIES:
        for limit in (1, 5, 20):
            query = SearchQuery(text, limit=limit)
            hits, read = rows_read(store, query)
            assert len(hits) == limit and read == limit  # (it read limit * 2 + 10)
            assert hits == every_row(store, query, monkeypatch)


def test_copies_in_a_lineage_still_collapse_as_when_every_row_is_read(
        store: SQLiteStore, monkeypatch: pytest.MonkeyPatch) -> None:
    first = next(s for s in store.list_sessions() if s.title == "notes 0")
    fork = store.fork_session(first.id, title="a fork")
    again = store.fork_session(fork.id, title="its fork")
    for text in QUERIES:
        for limit in (1, 3, 20):
            query = SearchQuery(text, limit=limit)
            hits, read = rows_read(store, query)
            assert hits == every_row(store, query, monkeypatch)
            assert len(hits) == limit and read <= limit * 2 + 10
    hits = store.search(SearchQuery("release build 6 on machine 0", limit=3))
    assert set(hits[0].lineage) == {first.id, fork.id, again.id}  # one hit for the three


@pytest.mark.parametrize("title", ["Été: DEPLOY to the new HOST", "deploy_host",
                                   "DEPLOY\u2009HOST", "\u212a: deploy the host"])
def test_a_title_holding_the_query_still_brings_its_hit_first(
        store: SQLiteStore, monkeypatch: pytest.MonkeyPatch, title: str) -> None:
    titled = store.create_session(title=title)
    store.append_messages(titled.id, [{"role": "user", "content": "deploy to the host"
                                       + " and more" * 8}])  # 13th of 103 by its score
    query = SearchQuery("deploy on host", limit=3)
    hits, read = rows_read(store, query)
    assert hits[0].session_id == titled.id  # ranked lower, but its title holds both words
    assert hits == every_row(store, query, monkeypatch) and read > 3
    store.rename_session(titled.id, "Été: a new host")  # no title holds both: 3 rows read
    hits, read = rows_read(store, query)
    assert titled.id not in {h.session_id for h in hits} and read == 3
