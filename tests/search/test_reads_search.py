"""``/v1/refold/search``'s handler: sentences, lineage, ``mode`` (in process; the route is thin)."""

from __future__ import annotations

import anyio
import pytest

from refold.errors import InvalidInput
from refold.server import reads
from refold.store import Store


def test_search_answers_a_sentence_with_one_hit_per_message(store: Store) -> None:
    s = store.create_session(owner="t1")
    store.append_messages(s.id, [{"role": "user", "content": "the walrus budget is 40 euros"}])
    fork = store.fork_session(s.id)
    out = anyio.run(reads.search, store, "t1", "how big was the walrus budget?", 10, "fts")
    [hit] = out["data"]
    assert set(hit["lineage"]) == {s.id, fork.id}
    assert anyio.run(reads.search, store, "t2", "walrus budget", 10, None)["data"] == []
    with pytest.raises(InvalidInput):
        anyio.run(reads.search, store, "t1", "walrus", 10, "bogus")


def test_search_takes_the_cli_filters_and_refuses_bad_ones(store: Store) -> None:
    """``/v1/refold/search`` took only q, limit and mode: a tenant could not narrow it to a
    session, a role or a time, nor sort by date (``sort`` was ignored), as ``refold search``
    and ``session_search`` can."""
    import dataclasses

    def run(**params: str) -> list[tuple[str, int]]:
        out = anyio.run(reads.search, store, "t1", "deploy", 10, "fts", params)
        return [(h["session_title"], h["seq"]) for h in out["data"]]

    first = store.create_session(title="ops", owner="t1", source="cli")
    store.append_messages(first.id, [{"role": "user", "content": "deploy the api"},
                                     {"role": "assistant", "content": "deploy done"}])
    old = store.create_session(title="old", owner="t1", source="import")
    store.append_messages(old.id, [{"role": "user", "content": "deploy the worker"}])
    rows = [dataclasses.replace(m, created_at=1_000_000_000.0) for m in store.get_messages(old.id)]
    theirs = store.create_session(title="ops2", owner="t2")
    store.append_messages(theirs.id, [{"role": "user", "content": "deploy theirs"}])
    back = dataclasses.replace(store.get_session(old.id), id="old-2001", title="old 2001",
                               started_at=1_000_000_000.0)
    assert store.import_session(back, iter(dataclasses.replace(r, session_id=back.id)
                                           for r in rows), [], [])
    store.delete_session(old.id)
    assert set(run()) == {("ops", 1), ("ops", 2), ("old 2001", 1)}
    assert set(run(session="ops")) == {("ops", 1), ("ops", 2)}
    # newest first: the most recently stored (the README says so), the 2001 import here
    assert run(sort="recency") == [("old 2001", 1), ("ops", 2), ("ops", 1)]
    assert run(role="assistant") == [("ops", 2)]
    assert set(run(source="import")) == {("old 2001", 1)}
    assert ("old 2001", 1) not in run(since="30d")
    assert run(until="2002-01-01") == [("old 2001", 1)]
    out = anyio.run(reads.search, store, "t1", "deploy", 10, "fts", {"window": "0"})
    assert all(h["window"] == [] for h in out["data"])
    with pytest.raises(Exception, match="no session"):
        run(session="ops2")  # another tenant's: not found for this one
    for bad in ({"role": "boss"}, {"sort": "newest"}, {"window": "99"}, {"since": "soon"}):
        with pytest.raises(InvalidInput):
            run(**bad)
