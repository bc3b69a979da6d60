"""The builtin summary's "Last assistant step" is the agent's, never an earlier summary.

OpenCode through ``refold serve``: in a tool loop whose assistant turns are calls without text,
the second compaction's "In Progress" read "Last assistant step: [CONTEXT SUMMARY — REFERENCE
ONLY] Earlier turns…" (the summary an earlier compaction put in, the last assistant text in
the stretch) in 13 of 26 requests."""

from __future__ import annotations

import json
from typing import Any

from refold.compaction import compact
from refold.compaction.summary import ACK, PREFIX


def _loop(start: int, end: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for k in range(start, end):
        call = {"id": f"c{k}", "type": "function", "function": {
            "name": "bash", "arguments": json.dumps({"command": f"pytest tests/test_{k}.py"})}}
        out += [{"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": f"c{k}",
                 "content": f"tests/test_{k}.py ... 3 passed " + "x " * 300}]
    return out


def test_a_second_compaction_does_not_quote_the_first_summary_as_the_last_step() -> None:
    head = [{"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "Make every test in tests/ pass."}]
    loop = _loop(0, 12)
    loop[1]["content"] = "y " * 3000  # a big first result: the head is the request alone
    first = compact([*head, *loop], context_length=8000)
    assert first.messages[2]["role"] == "assistant" and first.report.summary is not None
    again = compact([*first.messages, *_loop(12, 24)], context_length=8000)
    summary = again.report.summary or ""
    assert summary, again.report.reason
    steps = [line for line in summary.splitlines() if "Last assistant step" in line]
    assert not any(PREFIX[:30] in line or ACK["assistant"] in line for line in steps), steps
