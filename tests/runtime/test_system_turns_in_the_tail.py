"""System turns an agent puts inside the conversation (Claude Code's reminders, sent in place
under Anthropic's ``mid-conversation-system`` beta) near its end.

With the real Claude Code on a 30k window, 5 of 22 turns carried "compaction not stored: the
summarized stretch did not line up with the stored messages": compaction moved every such
turn up to the system prefix, the tail it kept no longer matched the stored rows, nothing was
stored, and the context went on growing past the window (8,896 tokens on an 8,000-token
window in the probe's reduced run). A system turn in the kept tail stays where it was, and a
reminder repeated in the summarized stretch moves up to the prefix once."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import refold
from refold.runtime import Engine
from refold.runtime.session import SessionRuntime
from refold.store import Store

REMINDER = {"role": "system", "content": "Reminder: the task tools haven't been used recently."}


def _call(k: int) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"t{k}", "type": "function",
         "function": {"name": "Read", "arguments": f'{{"p": "f{k}"}}'}}]}


def _result(k: int) -> dict[str, Any]:
    body = "\n".join(f"file{k} line {j}: alpha bravo charlie delta echo foxtrot golf hotel"
                     for j in range(60))
    return {"role": "tool", "tool_call_id": f"t{k}", "content": body}


@pytest.fixture
def agent(tmp_path: Any) -> Iterator[tuple[Store, SessionRuntime, list[dict[str, Any]]]]:
    """A session on an 8k window and the start of its history."""
    store = refold.open(str(tmp_path / "r.db"))
    engine = Engine(store, model="gpt-4o-mini", context_length=8000,
                    background_precompact=False)
    try:
        yield store, engine.open_session(new=True, title="reminders"), [
            {"role": "system", "content": "You are a test agent."},
            {"role": "user", "content": "read the files please"}]
    finally:
        engine.close()
        store.close()


def test_a_reminder_in_the_tail_does_not_stop_compaction(
        agent: tuple[Store, SessionRuntime, list[dict[str, Any]]]) -> None:
    store, rt, history = agent
    sizes, warnings = [], []
    for k in range(20):
        prepared = rt.prepare_history([dict(m) for m in history])
        sizes.append(prepared.tokens)
        # the copies of a repeated reminder moved up to the prefix: one (they stayed there
        # for good, one more each compaction)
        lead = next(i for i, m in enumerate(prepared.messages) if m["role"] != "system")
        assert [m["content"] for m in prepared.messages[:lead]].count(
            REMINDER["content"]) <= 1
        warnings += [w for w in prepared.warnings if "did not line up" in w]
        rt.record(_call(k))
        history += [_call(k), _result(k)]
        if k in (3, 5, 9, 10, 14):  # after a tool result, as Claude Code puts them
            history.append(dict(REMINDER))
    rt.prepare_history([dict(m) for m in history])
    assert warnings == []
    assert max(sizes) <= 8000, sizes  # it reached 7,756 tokens, compacting nothing
    assert store.list_checkpoints(rt.session_id)
    stored = store.get_messages(rt.session_id, limit=200)
    assert len(stored) == len(history) - 1  # each message once (the prefix is no row)


def test_reminders_that_differ_each_time_do_not_grow_the_prefix_without_end(
        agent: tuple[Store, SessionRuntime, list[dict[str, Any]]]) -> None:
    # (a todo list's state, a changed file's notice): each compaction moved every one up to
    # the prefix for good: 11 system messages after 23 turns, one more each compaction
    from refold.compaction.core import MAX_MOVED_SYSTEM

    store, rt, history = agent
    leads = []
    for k in range(30):
        prepared = rt.prepare_history([dict(m) for m in history])
        leads.append(next(i for i, m in enumerate(prepared.messages)
                          if m["role"] != "system"))
        rt.record(_call(k))
        history += [_call(k), _result(k)]
        if k % 2 == 1:
            history.append({"role": "system", "content": f"Todo list: step {k} done"})
    assert max(leads) <= 1 + MAX_MOVED_SYSTEM, leads
    assert len(store.list_checkpoints(rt.session_id)) >= 5
    assert len(store.get_messages(rt.session_id, limit=500)) == len(history) - 3  # all kept
