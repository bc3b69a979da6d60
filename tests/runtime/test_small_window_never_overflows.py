"""A window that the system prompt and tools mostly fill: the context stays under it.

Claude Code through ``refold serve`` on a 30k window (its tools and system prompt ~19.5k of the
22.5k threshold): the first plans found nothing to summarize between the protected head and
tail, each was counted as an ineffective compaction, auto-compaction was blocked for 5 minutes
and the context grew to 153% of the window. Here a system prompt of ~3.4k tokens in an 8k
window and an agent's tool turns of ~430 tokens: before the fix the context reached 13.7k
tokens on turn 24 (171% of the window) with no compaction at all."""

from __future__ import annotations

import json
from typing import Any

import refold
from refold.runtime import Engine


def test_the_context_stays_under_the_window_when_little_can_be_summarized(tmp_path: Any
                                                                            ) -> None:
    store = refold.open(str(tmp_path / "r.db"))
    engine = Engine(store, model="gpt-4o-mini", context_length=8000,
                    background_precompact=False)
    try:
        rt = engine.open_session(new=True, title="small window")
        system = "You are a coding agent. " + " ".join(f"rule{j} applies" for j in range(1100))
        prepared = rt.prepare([{"role": "user", "content": "Fix the failing test in app.py"}],
                              system_prompt=system)
        sizes = []
        for k in range(24):
            call = {"id": f"c{k}", "type": "function", "function": {
                "name": "bash", "arguments": json.dumps({"command": f"cat part{k}.txt"})}}
            rt.record({"role": "assistant", "content": f"step {k}", "tool_calls": [call]},
                      usage={"prompt_tokens": prepared.tokens, "completion_tokens": 10})
            prepared = rt.prepare([{"role": "tool", "tool_call_id": f"c{k}",
                                    "content": " ".join(f"tok{j}" for j in range(200))}])
            sizes.append(prepared.tokens)
        assert max(sizes) <= 8000, sizes
        assert store.list_checkpoints(rt.session_id)  # it compacted rather than give up
        stored = store.get_messages(rt.session_id, limit=100)
        assert len(stored) == 1 + 24 * 2  # nothing lost to the compactions
    finally:
        engine.close()
        store.close()
