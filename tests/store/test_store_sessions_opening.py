"""Conformance: ``sessions_opening_with`` (every backend), the lookup behind importing a
transcript that has no id of its own (a JSONL export imported back): the sessions whose first
message has the identity, of one owner, the newest first, copies in forks included."""

from __future__ import annotations

from typing import Any

from refold.messages.model import chain_identities
from refold.store import Store


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def test_sessions_are_found_by_their_first_message_only(store: Store) -> None:
    opening = user("plan the migration")
    older = store.create_session(title="older", started_at=1_000.0)
    store.append_messages(older.id, [opening, {"role": "assistant", "content": "ok"}])
    newer = store.create_session(title="newer", started_at=2_000.0)
    store.append_messages(newer.id, [opening])
    later_in = store.create_session(title="later in")  # the message, but not first
    store.append_messages(later_in.id, [user("hello"), opening])
    theirs = store.create_session(title="theirs", owner="bob")
    store.append_messages(theirs.id, [opening])
    fork = store.fork_session(older.id, 1)
    key = chain_identities([opening])[0]
    found = store.sessions_opening_with(key)
    assert set(found) == {older.id, newer.id, fork.id}
    assert found.index(newer.id) < found.index(older.id)
    assert store.sessions_opening_with(key, owner="bob") == [theirs.id]
    assert store.sessions_opening_with(key, limit=1) == found[:1]
    assert store.sessions_opening_with("no such identity") == []
