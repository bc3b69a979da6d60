"""A chain of stored responses is read once per process (``responses_api._Chains``): each
``previous_response_id`` turn reads only the responses stored since, and still finds what
another process stored, an event committed out of order, and nothing of another tenant's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from refold.errors import NotFound
from refold.server.responses_api import RESPONSE_EVENT, ResponseLog, response_id
from refold.store.sqlite import SQLiteStore


def respond(store: SQLiteStore, session_id: str, previous: str | None, n: int) -> str:
    rid = response_id(session_id)
    store.append_event(session_id, RESPONSE_EVENT, {
        "id": rid, "previous_response_id": previous,
        "input": [{"type": "message", "role": "user", "content": f"question {n}"}],
        "response": {"id": rid, "output": [{"type": "message", "role": "assistant",
                                            "content": [{"type": "output_text",
                                                         "text": f"answer {n}"}]}]}})
    return rid


def texts(items: list[Any]) -> list[str]:
    return [i["content"] if isinstance(i["content"], str) else i["content"][0]["text"]
            for i in items]


def test_a_chain_read_once_still_sees_what_is_stored_after(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "a.db"))
    other = SQLiteStore(str(tmp_path / "a.db"))  # another process's connection to the file
    session = store.create_session(title="chain")
    gap = store.append_event(session.id, "filler", {}).id  # an id left free below the chain's
    store.append_event(session.id, "note", {})  # (so the next id is not the freed one)
    store.db.conn.execute("DELETE FROM events WHERE id = ?", (gap,))
    store.db.conn.commit()
    last = None
    for n in range(3):
        last = respond(store, session.id, last, n)
    assert last is not None
    assert texts(ResponseLog(store, "").chain_items(last)) == [
        "question 0", "answer 0", "question 1", "answer 1", "question 2", "answer 2"]
    reads: list[int] = []
    listing = store.list_events

    def counted(session_id: str, kind: str | None = None, *, after_id: int = 0) -> Any:
        found = listing(session_id, kind, after_id=after_id)
        reads.append(len(found))
        return found

    store.list_events = counted  # type: ignore[method-assign]
    newer = respond(other, session.id, last, 3)
    assert texts(ResponseLog(store, "").chain_items(newer))[-2:] == ["question 3", "answer 3"]
    assert reads == [1]  # the one response stored since, not the chain again
    assert texts(ResponseLog(store, "").chain_items(last))[-1] == "answer 2"
    assert reads == [1]  # (all of it read already)
    # an event committed after a later one was read (PostgreSQL's ids can commit out of order)
    rid = response_id(session.id)
    store.db.conn.execute(
        "INSERT INTO events (id, session_id, kind, payload, created_at) VALUES "
        "(?, ?, ?, json_object('id', ?, 'previous_response_id', NULL, 'input', json('[]'), "
        "'response', json_object('output', json('[]'))), 0)", (gap, session.id, RESPONSE_EVENT, rid))
    store.db.conn.commit()
    assert ResponseLog(store, "").chain_items(rid) == []
    store.close()
    other.close()


def test_another_tenant_never_reads_a_cached_chain(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "b.db"))
    mine = store.create_session(title="mine", owner="alice")
    last = respond(store, mine.id, None, 0)
    assert texts(ResponseLog(store, "alice").chain_items(last)) == ["question 0", "answer 0"]
    with pytest.raises(NotFound):
        ResponseLog(store, "bob").chain_items(last)
    store.delete_session(mine.id)
    with pytest.raises(NotFound):  # a deleted session's chain is gone, cached or not
        ResponseLog(store, "alice").chain_items(last)
    store.close()


def test_the_cache_stays_bounded(tmp_path: Path) -> None:
    from refold.server.responses_api import _Chains

    store = SQLiteStore(str(tmp_path / "c.db"))
    chains = _Chains(sessions=2, chars=10_000)
    heads = []
    for n in range(3):
        session = store.create_session(title=f"s{n}")
        heads.append((session.id, respond(store, session.id, None, n)))
    for session_id, head in heads:
        assert head in chains.links(store, session_id, head)
    assert list(chains._by_store[store]) == [heads[1][0], heads[2][0]]  # the oldest went
    big = store.create_session(title="big")
    last = None
    for n in range(200):  # ~60 characters of JSON a response: over 10,000 in all
        last = respond(store, big.id, last, n)
    assert last is not None and last in chains.links(store, big.id, last)
    assert list(chains._by_store[store]) == [big.id]  # the others went to make room
    store.close()
