"""A turn over the compaction threshold whose plan was dropped says so (``Prepared.warnings``,
the proxy's X-Refold-Warnings). A checkpoint that would not move the view forward was dropped
with a log line only, turn after turn, and the caller first heard of it when the request was
over the window."""

from __future__ import annotations

import json
from typing import Any

import pytest

import refold
from refold.errors import Conflict
from refold.runtime import Engine


def test_a_dropped_plan_is_no_silent_pause(tmp_path: Any, monkeypatch: pytest.MonkeyPatch
                                           ) -> None:
    store = refold.open(str(tmp_path / "r.db"))

    def refuse(session_id: str, draft: Any, **kw: Any) -> Any:
        raise Conflict(f"checkpoint would not move session {session_id}'s view forward",
                       reason="backwards")

    monkeypatch.setattr(store, "add_checkpoint", refuse)
    engine = Engine(store, model="gpt-4o-mini", context_length=8000,
                    background_precompact=False)
    try:
        rt = engine.open_session(new=True, title="dropped")
        rt.prepare([{"role": "user", "content": "Fix the failing test in src/app.py"}],
                   system_prompt="You are a coding agent.")
        warned = []
        for k in range(20):
            call = {"id": f"c{k}", "type": "function", "function": {
                "name": "bash", "arguments": json.dumps({"command": f"cat part{k}.txt"})}}
            rt.record({"role": "assistant", "content": f"step {k}", "tool_calls": [call]})
            prepared = rt.prepare([{"role": "tool", "tool_call_id": f"c{k}",
                                    "content": " ".join(f"tok{j}" for j in range(400))}])
            if prepared.tokens >= prepared.threshold:
                warned.append(any("compaction not stored" in w for w in prepared.warnings))
        assert warned and warned[0]  # the first turn over the threshold already says so
    finally:
        engine.close()
        store.close()
