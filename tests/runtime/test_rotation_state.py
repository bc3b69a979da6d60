"""Task state crosses ``rotate_on_compaction``: the child starts with the latest todo list and
the recorded system prompt as its own events, so a resumed child (and anything that reads the
child's events alone — ``refold context``, ``sessions compact``) has them."""

from __future__ import annotations

from typing import Any

from refold.compaction import CompactionPolicy
from refold.compaction.session import compact_session
from refold.runtime import Engine
from refold.runtime.rotation import EVENT, rotate_session
from refold.store import Store
from refold.tools import agent_tools, load_todos

from ._helpers import WINDOW, answer, tool_turn

SYSTEM = {"role": "system", "content": "You are a test agent."}
TODOS = [{"id": "1", "content": "fix mod0", "status": "completed"},
         {"id": "2", "content": "fix the rest", "status": "in_progress"}]


def _latest(store: Store, session_id: str, kind: str) -> dict[str, Any] | None:
    events = store.list_events(session_id, kind)
    return events[-1].payload if events else None


def test_todos_and_system_prompt_follow_a_rotation_and_a_resume(store: Store) -> None:
    policy = CompactionPolicy(rotate_on_compaction=True)
    history: list[dict[str, Any]] = [SYSTEM]
    with Engine(store, model="gpt-4o-mini", context_length=WINDOW, policy=policy,
                background_precompact=False) as engine:
        rt = engine.open_session(new=True, title="tasks")
        first = rt.session_id
        tools = agent_tools(store, session_id=lambda: rt.session_id)
        tools.call("todo", {"todos": TODOS})
        for i in range(12):
            history += tool_turn(i)
            rt.prepare_history(list(history))
            history.append(answer(i))
            rt.record(history[-1])
        assert rt.session_id != first  # rotated
        child = engine.open_session("tasks").session_id  # a resume lands on the child
    assert child == rt.session_id
    assert _latest(store, child, "todo") == {"todos": TODOS}  # the child's own copy
    assert _latest(store, child, "system_prompt") == {"text": SYSTEM["content"]}
    assert load_todos(store, child) == TODOS
    # a change in the child is the child's; the parent's list is untouched
    agent_tools(store, session_id=child).call(
        "todo", {"todos": [{"id": "2", "status": "completed"}], "merge": True})
    assert load_todos(store, child)[1]["status"] == "completed"
    assert load_todos(store, first) == TODOS


def test_sessions_compact_with_rotate_carries_the_state_events(store: Store) -> None:
    session = store.create_session(title="manual", model="gpt-4o-mini")
    messages: list[dict[str, Any]] = []
    for i in range(12):
        messages += [*tool_turn(i), answer(i)]
    store.append_messages(session.id, messages)
    store.append_event(session.id, "system_prompt", {"text": "old prompt"})
    store.append_event(session.id, "system_prompt", {"text": SYSTEM["content"]})
    store.append_event(session.id, "todo", {"todos": TODOS})
    done = compact_session(store, session.id, context_length=WINDOW, rotate=True,
                           system_prompt=SYSTEM["content"])
    assert done.rotated_from == session.id
    child = done.session.id
    assert [e.payload for e in store.list_events(child, "system_prompt")] == [
        {"text": SYSTEM["content"]}]  # only the latest state, once
    assert [e.payload for e in store.list_events(child, "todo")] == [{"todos": TODOS}]


def test_the_one_rotation_carries_each_state_event_once(store: Store) -> None:
    """``rotate_session`` is the one rotation (the runtime's and ``refold sessions compact
    --rotate``): after a checkpoint, the child gets the compacted view, one rotation record and
    the latest task state once (the CLI's former second path gave the child them twice)."""
    session = store.create_session(title="manual", model="gpt-4o-mini")
    messages: list[dict[str, Any]] = []
    for i in range(12):
        messages += [*tool_turn(i), answer(i)]
    store.append_messages(session.id, messages)
    store.append_event(session.id, "system_prompt", {"text": SYSTEM["content"]})
    store.append_event(session.id, "todo", {"todos": TODOS})
    done = compact_session(store, session.id, context_length=WINDOW, rotate=False,
                           system_prompt=SYSTEM["content"])
    assert done.stored
    child = rotate_session(store, session.id)
    assert [e.payload for e in store.list_events(child, "system_prompt")] == [
        {"text": SYSTEM["content"]}]
    assert [e.payload for e in store.list_events(child, "todo")] == [{"todos": TODOS}]
    assert len(store.list_events(child, EVENT)) == 1
    assert store.get_session(session.id).end_reason == "compaction"
    assert store.resolve_resume(session.id).id == child
