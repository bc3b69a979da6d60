"""Proxy mode (``prepare_history``) across ``rotate_on_compaction``: the re-sent history maps
onto the compaction child, across several rotations and a reopened runtime."""

from __future__ import annotations

from typing import Any

import pytest

from refold.compaction import CompactionPolicy
from refold.runtime import Engine
from refold.store import Store

from ._helpers import WINDOW, answer, tool_turn

SYSTEM = {"role": "system", "content": "You are a test agent."}


def _users(store: Store, session_id: str) -> list[str]:
    return [str(r.message["content"]) for r in store.get_messages(session_id)
            if r.role == "user"]


@pytest.mark.parametrize("background", [False, True])
def test_history_resent_across_several_rotations_is_stored_once(store: Store,
                                                                background: bool) -> None:
    policy = CompactionPolicy(rotate_on_compaction=True)
    history: list[dict[str, Any]] = [SYSTEM]
    with Engine(store, model="gpt-4o-mini", context_length=WINDOW, policy=policy,
                background_precompact=background) as engine:
        rt = engine.open_session(new=True, title="loop")
        swapped = 0
        for i in range(30):
            if i == 20:  # a restarted proxy: a fresh runtime resumes the chain from the store
                rt = engine.open_session("loop")
            history += tool_turn(i)
            prepared = rt.prepare_history(list(history))
            reply = answer(i)
            rt.record(reply)
            history.append(reply)
            assert prepared.messages[-1] == history[-2]
            swapped += rt.precompactor.used if i in (19, 29) else 0
        final = rt.session_id
    assert (swapped > 0) == background  # the background variant did swap plans in
    chain = [s for s in store.list_sessions() if s.title and s.title.startswith("loop")]
    assert len(chain) >= 3  # rotated at least twice
    root = next(s for s in chain if s.title == "loop")
    assert store.resolve_resume(root.id).id == final  # resume follows the whole chain
    for session in chain:
        users = _users(store, session.id)
        assert len(users) == len(set(users)), session.title  # nothing stored twice
        rows = store.get_messages(session.id, include_inactive=True)
        assert all(r.active for r in rows), session.title  # and nothing rewound
    last = store.get_messages(final)
    assert [r.message for r in last[-4:]] == history[-4:]


def test_a_history_that_leaves_the_rotated_chain_is_synced_plainly(store: Store) -> None:
    policy = CompactionPolicy(rotate_on_compaction=True)
    history: list[dict[str, Any]] = [SYSTEM]
    with Engine(store, model="gpt-4o-mini", context_length=WINDOW, policy=policy,
                background_precompact=False) as engine:
        rt = engine.open_session(new=True, title="edit")
        first = rt.session_id
        i = 0
        while rt.session_id == first:
            history += tool_turn(i)
            rt.prepare_history(list(history))
            history.append(answer(i))
            rt.record(answer(i))
            i += 1
        # the client goes back before the rotation point and asks something else
        edited = [*history[:3], {"role": "user", "content": "start over: only module 0"}]
        prepared = rt.prepare_history(edited)
        child = rt.session_id
    assert prepared.messages[-1] == edited[-1]
    assert [r.message for r in store.get_messages(child)] == edited[1:]  # kept, as sent
    archived = [r.message for r in store.get_messages(first)]
    assert len(archived) >= 12 and archived == history[1:1 + len(archived)]  # archive intact
