"""A tool result that arrived late — a few messages after its call — stays with its call.

``refold compact`` cut the call and its late result into different units: both in the kept tail,
the call got a stub ("result not kept in this context"), the result was dropped as an orphan and
its text was nowhere in the output. A stored session of that shape could not be compacted at all
(the stubbed tail did not map onto the ledger rows: "the new cut does not map onto the ledger"),
so the runtime kept sending the whole history into a window far too small for it. The result now
moves next to its call, as ``refold.messages.repair`` moves it, and no cut falls between them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from refold.compaction import compact
from refold.compaction.session import compact_session, projection_messages
from refold.compaction.structure import provider_problems, repair_tool_pairs, split_units
from refold.messages import repair
from refold.messages.model import wire_form
from refold.runtime import Engine
from refold.store import Store

SYSTEM = "You are an agent."
LATE = "LATE RESULT: 38 tests passed"


def _transcript(late: int = 38, arrives: int = 39, steps: int = 40) -> list[dict[str, Any]]:
    """``steps`` test runs with bulky results; call ``c{late}``'s result comes after step
    ``arrives``'s instead of right after the call."""
    msgs: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    for i in range(steps):
        msgs.append({"role": "user", "content": f"step {i}: run tests in module_{i}.py"})
        msgs.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}", "type": "function",
             "function": {"name": "sh", "arguments": json.dumps({"cmd": f"pytest module_{i}.py"})}}]})
        if i != late:
            msgs.append({"role": "tool", "tool_call_id": f"c{i}",
                         "content": "FAILED assert x == y " * 150})
        if i == arrives:
            msgs.append({"role": "tool", "tool_call_id": f"c{late}", "content": LATE})
        msgs.append({"role": "assistant", "content": f"module_{i} done."})
    return msgs


def _calls(messages: list[dict[str, Any]]) -> set[str]:
    return {c["id"] for m in messages for c in m.get("tool_calls") or []}


def test_compact_keeps_a_late_result_next_to_its_call() -> None:
    msgs = _transcript()
    result = compact(msgs, context_length=4000)
    out = result.messages
    assert result.report.changed and provider_problems(out) == []
    assert not any("repaired" in w for w in result.report.warnings), result.report.warnings
    at = next(i for i, m in enumerate(out) if "c38" in _calls([m]))
    assert out[at + 1] == {"role": "tool", "tool_call_id": "c38", "content": LATE}
    assert sum(m.get("tool_call_id") == "c38" for m in out) == 1
    # the same placement ``refold.messages.repair`` gives the input
    fixed = repair(msgs).messages
    assert fixed[fixed.index(out[at]) + 1] == out[at + 1]


@pytest.mark.parametrize("late", [2, 14, 25, 31, 34, 36, 38])
@pytest.mark.parametrize("delay", [1, 3])
def test_no_cut_parts_a_call_from_its_late_result(late: int, delay: int) -> None:
    """Wherever the pair falls, the cut keeps both (the result verbatim after its call) or
    summarizes both: never a stub beside a result dropped as an orphan."""
    msgs = _transcript(late, min(late + delay, 39))
    unit = next(u for u in split_units(msgs)
                if f"c{late}" in _calls([msgs[u.start]]))
    assert any(m.get("content") == LATE for m in msgs[unit.start:unit.end])
    result = compact(msgs, context_length=4000)
    out = result.messages
    assert provider_problems(out) == []
    assert not any("repaired" in w for w in result.report.warnings), result.report.warnings
    assert (f"c{late}" in _calls(out)) == any(m.get("content") == LATE for m in out)


def test_repair_tool_pairs_moves_a_late_result_and_still_drops_orphans() -> None:
    msgs = _transcript(late=1, arrives=2, steps=3)[1:]
    msgs.append({"role": "tool", "tool_call_id": "nobody", "content": "orphan"})
    out, stubs, orphans = repair_tool_pairs(msgs)
    assert (stubs, orphans) == (0, 1)
    assert out == [m for m in repair(msgs).messages]


def test_a_session_with_a_late_result_is_compacted_and_stored(store: Store) -> None:
    msgs = _transcript()
    session = store.create_session(title="late", model="gpt-4o-mini", source="test")
    store.append_messages(session.id, msgs[1:])
    before = store.get_messages(session.id)
    done = compact_session(store, session.id, context_length=4000, system_prompt=SYSTEM)
    assert done.stored and done.checkpoint is not None, done.note
    assert store.get_messages(session.id) == before  # the ledger is untouched
    assert any(m.get("content") == LATE for m in done.messages)
    # the stored view keeps the ledger's order; repaired for the provider (as the runtime sends
    # it) it is the compacted view, the late result next to its call
    view = projection_messages(store.projection(session.id), SYSTEM)
    assert [wire_form(m) for m in repair(view).messages] == \
        [wire_form(m) for m in done.messages]


def test_the_runtime_compacts_a_session_with_a_late_result(store: Store, tmp_path: Path
                                                            ) -> None:
    session = store.create_session(title="late", model="gpt-4o-mini", source="test")
    store.append_messages(session.id, _transcript()[1:])
    engine = Engine(store, model="gpt-4o-mini", context_length=4000,
                    memory_dir=tmp_path / "memories", background_precompact=False)
    try:
        rt = engine.open_session(session.id)
        prepared = rt.prepare([{"role": "user", "content": "continue"}])
        assert prepared.tokens <= 4000, prepared.warnings
        assert store.latest_checkpoint(session.id) is not None
        assert any(m.get("content") == LATE for m in prepared.messages)
        assert provider_problems(prepared.messages) == []
    finally:
        engine.close()
