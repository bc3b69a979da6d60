"""An agent working alone on one long request: the request stays verbatim and the work after it
is summarized. The tail used to reach back to the request (the last real user message), take the
whole conversation and leave nothing to summarize, so the window overflowed on every turn."""

from __future__ import annotations

import json
from typing import Any

import pytest

from refold.compaction import compact
from refold.compaction.structure import provider_problems

SPEC = ("Implement CSV export for the reports page.\n\nBackground: "
        + "The reports page lists invoices, customers and payments. " * 200
        + "\n\nAcceptance criteria:\n- Use semicolons as the delimiter.\n")


def agent_run(turns: int, opening: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."},
                                      *(opening or []), {"role": "user", "content": SPEC}]
    for i in range(turns):
        call = {"id": f"c{i}", "type": "function", "function": {
            "name": "bash", "arguments": json.dumps({"command": f"grep -n export src/m_{i}.py"})}}
        messages += [{"role": "assistant", "content": f"Checking module {i}.", "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": f"c{i}",
                      "content": f"{i}: def export_{i}(rows):\n" + "    rows.append(x)\n" * 40}]
    return messages


@pytest.mark.parametrize("turns", [60, 300])
def test_the_work_after_one_long_request_is_summarized(turns: int) -> None:
    messages = agent_run(turns)
    result = compact(messages, context_length=12000)
    report = result.report
    assert report.status == "ok" and report.fits and report.summarized > 0
    assert report.tokens_after <= report.target_tokens
    kept = [m for m in result.messages if m.get("content") == SPEC]
    assert len(kept) == 1  # the request, verbatim, once
    assert result.messages.index(kept[0]) == 1  # right after the system prompt
    assert result.messages[-1] == messages[-1]  # the newest result stays verbatim
    assert provider_problems(result.messages, "openai") == []
    assert provider_problems(result.messages, "anthropic") == []


def test_a_short_opening_exchange_stays_with_the_request() -> None:
    opening = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello!"}]
    result = compact(agent_run(80, opening), context_length=12000)
    assert result.report.status == "ok" and result.report.fits
    texts = [m.get("content") for m in result.messages[:4]]
    assert texts[1:] == ["hi", "Hello!", SPEC]


def test_a_long_conversation_before_the_request_is_still_summarized() -> None:
    # many earlier exchanges: they are no small head, so the request is not pulled into it
    opening: list[dict[str, Any]] = []
    for i in range(40):
        opening += [{"role": "user", "content": f"question {i} about the billing module " * 20},
                    {"role": "assistant", "content": f"answer {i} on invoices " * 30}]
    messages = [*agent_run(5, opening)]
    result = compact(messages, context_length=12000)
    assert result.report.summarized > 0
    assert not any(m.get("content") == opening[20]["content"] for m in result.messages)
    assert any(m.get("content") == SPEC for m in result.messages)  # the request stays verbatim
