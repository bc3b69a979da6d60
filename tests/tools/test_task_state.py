"""Task state (goal, plan, todos) as full-snapshot ledger events, shown once after a resume."""

from __future__ import annotations

import json

from refold.runtime import Engine
from refold.store import Store
from refold.tools import load_task_state, todo_tool


def test_goal_and_plan_join_the_todo_list_latest_write_wins(store: Store) -> None:
    session = store.create_session(title="t")
    tool = todo_tool(store, session.id)
    tool.handler({"goal": "ship 2.0", "todos": [{"id": "1", "content": "tests"}]})
    tool.handler({"plan": "tests, then tag"})
    out = json.loads(tool.handler({"todos": [{"id": "1", "status": "completed"}],
                                   "merge": True, "goal": "ship 2.0.1"}))
    assert (out["goal"], out["plan"]) == ("ship 2.0.1", "tests, then tag")
    events = store.list_events(session.id, "todo")
    assert len(events) == 3 and events[-1].payload == {  # every event is the whole state
        "todos": [{"id": "1", "content": "tests", "status": "completed"}],
        "goal": "ship 2.0.1", "plan": "tests, then tag"}
    assert load_task_state(store, session.id)["goal"] == "ship 2.0.1"
    tool.handler({})  # a read writes nothing
    assert len(store.list_events(session.id, "todo")) == 3


def test_a_resumed_session_shows_its_open_task_state_once(sqlite_store: Store) -> None:
    with Engine(sqlite_store, model="m", context_length=100_000) as eng:
        rt = eng.open_session(new=True, title="release")
        tool = todo_tool(sqlite_store, rt.session_id)
        first = rt.prepare([{"role": "user", "content": "plan the release"}])
        assert "<task-state>" not in json.dumps(first.messages)  # a new session: nothing
        tool.handler({"goal": "ship 2.0", "plan": "test, tag, announce",
                      "todos": [{"id": "1", "content": "run tests", "status": "completed"},
                                {"id": "2", "content": "tag v2.0", "status": "in_progress"}]})
        rt.record({"role": "assistant", "content": "planned"})
    with Engine(sqlite_store, model="m", context_length=100_000) as eng:
        rt = eng.open_session("release")
        turn = rt.prepare([{"role": "user", "content": "where were we?"}])
        note = turn.messages[-1]["content"]
        assert note.startswith("where were we?") and "<task-state>" in note
        assert "Goal: ship 2.0" in note and "[>] 2. tag v2.0" in note and "[x] 1." in note
        rt.record({"role": "assistant", "content": "tagging"})
        later = rt.prepare([{"role": "user", "content": "ok"}])
        assert "<task-state>" not in json.dumps(later.messages)  # once
        stored = [m.message["content"] for m in sqlite_store.get_messages(rt.session_id)]
        assert not any("<task-state>" in str(c) for c in stored)  # never in the ledger
