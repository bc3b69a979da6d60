"""Compaction of stored sessions on both backends: checkpoints, leases, rotation, projection."""

from __future__ import annotations

import json
from typing import Any

import pytest
from agent_transcript import agent_transcript

from refold.compaction.policy import CompactionPolicy
from refold.compaction.session import (
    compact_session,
    context_breakdown,
    projection_messages,
)
from refold.compaction.structure import provider_problems
from refold.compaction.summary import END_MARKER
from refold.errors import Conflict
from refold.messages.model import wire_form
from refold.store import Store
from refold.tokens import get_counter

POLICY = CompactionPolicy(output_reserve_tokens=0, summary_min_tokens=500)
SYSTEM = "You are a coding agent."


def _session(store: Store, rounds: int = 40) -> str:
    session = store.create_session(title="Fix login", model="gpt-4o", source="test")
    store.append_messages(session.id, agent_transcript(rounds)[1:])  # system prompt not stored
    return session.id


def test_compaction_appends_a_checkpoint_and_the_projection_serves_it(store: Store) -> None:
    sid = _session(store)
    before = store.get_messages(sid)
    done = compact_session(store, sid, context_length=12_000, policy=POLICY,
                           system_prompt=SYSTEM)
    assert done.stored and done.checkpoint is not None and done.report.status == "ok"
    assert store.get_messages(sid) == before  # the ledger is untouched
    view = projection_messages(store.projection(sid), SYSTEM)
    assert [wire_form(m) for m in view] == [wire_form(m) for m in done.messages]
    assert provider_problems(view, "openai") == []
    assert any(END_MARKER in str(m.get("content")) for m in view)
    cp = store.latest_checkpoint(sid)
    assert cp is not None and cp.tokens_after < cp.tokens_before and cp.anchors


def test_recompaction_builds_on_the_previous_checkpoint(store: Store) -> None:
    sid = _session(store)
    compact_session(store, sid, context_length=12_000, policy=POLICY, system_prompt=SYSTEM)
    store.append_messages(sid, agent_transcript(40)[2:])
    second = compact_session(store, sid, context_length=12_000, policy=POLICY,
                             system_prompt=SYSTEM)
    assert second.stored, second.note
    checkpoints = store.list_checkpoints(sid)
    assert len(checkpoints) == 2 and checkpoints[1].first_seq == checkpoints[0].first_seq
    view = projection_messages(store.projection(sid), SYSTEM)
    assert sum(END_MARKER in str(m.get("content")) for m in view) == 1
    assert provider_problems(view, "openai") == []


def test_a_held_lease_refuses_a_second_compactor(store: Store) -> None:
    sid = _session(store)
    assert store.acquire_lease(f"compact:{sid}", "other-host:1", 60)
    with pytest.raises(Conflict):
        compact_session(store, sid, context_length=12_000, policy=POLICY, holder="me:2")
    assert store.list_checkpoints(sid) == []
    store.release_lease(f"compact:{sid}", "other-host:1")
    assert compact_session(store, sid, context_length=12_000, policy=POLICY).stored


def test_rotate_on_compaction_starts_a_child_session(store: Store) -> None:
    sid = _session(store)
    rows_before = len(store.get_messages(sid))
    rotated = compact_session(store, sid, context_length=12_000,
                              policy=POLICY.with_overrides(rotate_on_compaction=True))
    child = rotated.session
    assert rotated.rotated_from == sid and child.id != sid
    assert child.parent_session_id == sid and child.link_kind == "compaction"
    assert child.title == "Fix login #2"
    assert store.get_session(sid).end_reason == "compaction"
    assert store.resolve_resume(sid).id == child.id
    assert len(store.get_messages(sid)) == rows_before  # the parent keeps every row
    rows = [r.message for r in store.get_messages(child.id)]
    assert provider_problems(rows, "openai") == []


def test_small_session_is_a_noop(store: Store) -> None:
    sid = _session(store, rounds=1)
    done = compact_session(store, sid, context_length=128_000, policy=POLICY)
    assert not done.stored and done.report.status in ("noop", "refused", "pruned")
    assert store.list_checkpoints(sid) == []


def test_context_breakdown_accounts_for_every_part(store: Store) -> None:
    sid = _session(store)
    compact_session(store, sid, context_length=12_000, policy=POLICY, system_prompt=SYSTEM)
    tools = [{"type": "function", "function": {"name": "terminal", "parameters": {}}}]
    breakdown = context_breakdown(store.projection(sid), context_length=12_000, model="gpt-4o",
                                  system_prompt=SYSTEM, memory="User prefers pytest.",
                                  tools=tools, policy=POLICY)
    parts = breakdown.parts
    assert parts["system"] > 0 and parts["memory"] > 0 and parts["summary"] > 0
    assert parts["tools"] > 0 and parts.get("tail:user", 0) > 0
    assert breakdown.total == sum(v for k, v in parts.items() if k != "tool_outputs")
    assert 0 < breakdown.percent_of_window < 100
    assert breakdown.as_dict()["checkpoint_id"] == breakdown.checkpoint_id


def test_projection_matches_the_runtime_view(store: Store) -> None:
    """The runtime reads the same checkpoint layout: both views must agree."""
    from refold.runtime.context import ContextOps

    sid = _session(store)
    compact_session(store, sid, context_length=12_000, policy=POLICY, system_prompt=SYSTEM)
    ops = ContextOps(model="gpt-4o", context_length=12_000, policy=POLICY)
    projection = store.projection(sid)
    assert ops.build(projection, SYSTEM) == projection_messages(projection, SYSTEM)


def test_two_compactors_at_once_never_compact_the_same_window_twice(store: Store) -> None:
    import threading

    sid = _session(store)
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def worker(name: str) -> None:
        barrier.wait()
        try:
            done = compact_session(store, sid, context_length=12_000, policy=POLICY,
                                   holder=name)
            outcomes.append("stored" if done.stored else "nothing")
        except Conflict:
            outcomes.append("conflict")

    threads = [threading.Thread(target=worker, args=(f"host:{i}",)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert "stored" in outcomes
    windows = [(c.first_seq, c.last_seq, c.tail_start_seq) for c in store.list_checkpoints(sid)]
    assert len(windows) == len(set(windows)) and len(windows) == outcomes.count("stored")


def test_a_cut_message_points_to_its_ledger_row(store: Store) -> None:
    """Issue 13 §4: the note in an oversized kept message that was cut names its ledger seq."""
    session = store.create_session(title="Build", model="gpt-4o", source="test")
    log = "\n".join(f"src/pkg/module_{i}.py:{i}: DeprecationWarning: call {i} is old"
                    for i in range(1500)) + "\nexit code 2"
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing build."}]
    for i in range(12):
        msgs += [{"role": "assistant", "content": f"Part {i}.", "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {
                "name": "execute_bash", "arguments": json.dumps({"command": f"make p{i}"})}}]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": "ok\n" * 300 + "exit code 0"}]
    msgs += [{"role": "assistant", "content": "All.", "tool_calls": [
        {"id": "z", "type": "function", "function": {
            "name": "execute_bash", "arguments": json.dumps({"command": "make all"})}}]},
        {"role": "tool", "tool_call_id": "z", "content": log}]
    store.append_messages(session.id, msgs)
    rows = store.get_messages(session.id)
    size = get_counter("gpt-4o").count_messages(msgs)
    done = compact_session(store, session.id, context_length=size, target_tokens=size // 4)
    assert done.stored and done.report.prune["messages_cut"] == 1, done.note
    last = done.messages[-1]["content"]
    assert f"in the session ledger at seq {rows[-1].seq} of session {session.id} …]" in last
    assert rows[-1].message["content"] == log  # the row it names holds the whole output
    view = projection_messages(store.projection(session.id), None)
    assert view[-1]["content"] == last  # the stored view carries the same pointer


def test_a_session_ending_with_calls_still_running_is_compacted_and_stored(store: Store) -> None:
    """An agent's session stored while its last calls run (imported mid-run; the runtime's
    post-response compaction): the compacted view ended with a stub result per running call
    ("not kept in this context", untrue), was longer than the ledger, and no checkpoint could
    be stored ("the new cut does not map onto the ledger"). The calls stay as they are."""
    sid = _session(store)
    running = {"role": "assistant", "content": "Running two more.", "tool_calls": [
        {"id": f"run{n}", "type": "function",
         "function": {"name": "bash", "arguments": json.dumps({"command": f"make t{n}"})}}
        for n in (1, 2)]}
    store.append_messages(sid, [running])
    done = compact_session(store, sid, context_length=12_000, policy=POLICY,
                           system_prompt=SYSTEM)
    assert done.stored and done.checkpoint is not None, done.note
    assert done.messages[-1]["tool_calls"] == running["tool_calls"]
    view = projection_messages(store.projection(sid), SYSTEM)
    assert view[-1].get("tool_calls") == running["tool_calls"]
    assert not any(m.get("tool_call_id", "").startswith("run") for m in view)


def test_a_call_that_never_had_a_result_is_not_said_to_be_left_out() -> None:
    from refold.compaction.structure import STUB_RESULT, repair_tool_pairs
    from refold.messages.repair import MISSING_RESULT

    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
        {"id": "b", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}
    out, stubs, _ = repair_tool_pairs([call, {"role": "user", "content": "go on"}],
                                      answered={"a"})
    assert stubs == 2 and [m["content"] for m in out[1:3]] == [STUB_RESULT, MISSING_RESULT]
    assert repair_tool_pairs([call], keep_pending=True)[0] == [call]
