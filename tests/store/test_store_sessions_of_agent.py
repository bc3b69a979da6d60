"""Conformance: ``sessions_of_agent`` and ``link_session`` (every backend), what ties an
agent's side calls and its continuations to its conversation (``refold.server.agents``)."""

from __future__ import annotations

from refold.store import Store
from refold.store.base import AGENT_EVENT, AGENT_SIDE_EVENT, AGENT_SUBAGENT_EVENT


def test_the_sessions_an_agent_id_was_noted_on_newest_first_per_owner(store: Store) -> None:
    first = store.create_session(title="first")
    side = store.create_session(title="title call")
    later = store.create_session(title="after its compaction")
    theirs = store.create_session(title="bob's", owner="bob")
    other = store.create_session(title="another agent's")
    store.append_event(first.id, AGENT_EVENT, {"id": "ses_1"})
    store.append_event(side.id, AGENT_SIDE_EVENT, {"id": "ses_1"})
    store.append_event(later.id, AGENT_EVENT, {"id": "ses_1"})
    store.append_event(theirs.id, AGENT_EVENT, {"id": "ses_1"})
    store.append_event(other.id, AGENT_EVENT, {"id": "ses_2"})
    sub = store.create_session(title="a subagent's")
    store.append_event(sub.id, AGENT_SUBAGENT_EVENT, {"id": "ses_1"})
    store.append_event(first.id, "todo", {"id": "ses_1"})  # another kind: not a note
    assert store.sessions_of_agent("ses_1") == [(sub.id, True), (later.id, False),
                                                (side.id, True), (first.id, False)]
    assert store.sessions_of_agent("ses_1", owner="bob") == [(theirs.id, False)]
    assert store.sessions_of_agent("ses_1", limit=1) == [(sub.id, True)]
    assert store.sessions_of_agent("nobody") == []


def test_link_session_links_only_an_unlinked_session_to_one_that_exists(store: Store) -> None:
    parent = store.create_session(title="conversation")
    child = store.create_session(title="title call")
    assert store.link_session(child.id, child.id, "side") is False  # never to itself
    assert store.link_session(child.id, "missing", "side") is False
    assert store.get_session(child.id).parent_session_id is None
    assert store.link_session(child.id, parent.id, "side") is True
    linked = store.get_session(child.id)
    assert (linked.parent_session_id, linked.link_kind) == (parent.id, "side")
    other = store.create_session(title="another")
    assert store.link_session(child.id, other.id, "continuation") is False  # linked already
    assert store.get_session(child.id).parent_session_id == parent.id
    assert [c.id for c in store.children(parent.id)] == [child.id]
    assert store.resolve_resume(parent.id).id == parent.id  # a side call never takes a turn
