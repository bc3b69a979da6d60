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
