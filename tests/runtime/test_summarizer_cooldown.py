"""A failing llm summarizer cools down in the runtime: after a failure the builtin summarizer
is used (the summary model is not asked again every turn) and the user is told why."""

from __future__ import annotations

from typing import Any

import pytest

from refold.compaction import CompactionPolicy, LLMSummarizer
from refold.llm import HttpChatClient
from refold.runtime import Engine
from refold.store import Store
from refold.testing import ScriptedReply, serve

from ._helpers import WINDOW, answer, tool_turn

SYSTEM = "You are a test agent."
FAILURES = {
    "server": ScriptedReply(status=500, error={"error": {"message": "boom"}}),
    "timeout": ScriptedReply(content="late", delay=2.0),
}


def _drive(engine: Engine, turns: int) -> tuple[list[Any], list[str]]:
    rt = engine.open_session(new=True)
    reports, warnings = [], []
    for i in range(turns):
        prepared = rt.prepare(tool_turn(i, size=250), system_prompt=SYSTEM)
        rt.record(answer(i))
        warnings += prepared.warnings
        if prepared.compaction is not None:
            reports.append(prepared.compaction)
    return reports, warnings


@pytest.mark.parametrize("failure", sorted(FAILURES))
@pytest.mark.parametrize("background", [False, True])
def test_a_failing_summary_model_is_not_retried_during_its_cooldown(
        store: Store, failure: str, background: bool) -> None:
    with serve(default=lambda _b: FAILURES[failure]) as llm, \
            HttpChatClient(llm.base_url) as client:
        summarizer = LLMSummarizer(client, model="summary-model", timeout=0.5)
        with Engine(store, model="gpt-4o-mini", context_length=WINDOW, summarizer=summarizer,
                    policy=CompactionPolicy(), background_precompact=background) as engine:
            reports, warnings = _drive(engine, 24)
        asked = len(llm.llm.requests)
    assert len(reports) >= 2  # compacted more than once over the run
    assert reports[0].status == "fallback" and reports[0].summarizer == "builtin"
    # one failure starts the cooldown (60 s here): no later compaction asks the model again
    assert asked == 1
    assert all(r.summarizer == "builtin" for r in reports)
    cooling = [w for w in warnings if "builtin summarizer" in w and "summary-model" in w]
    assert cooling, warnings
    assert len(cooling) <= 2  # told once when it fails, once while cooling — not every turn


def test_the_summary_model_is_asked_again_once_the_cooldown_is_over(store: Store) -> None:
    replies = [FAILURES["server"]]
    with serve(default=lambda _b: replies[0] if replies else ScriptedReply(
        content="## Goal\nok\n## Progress\n### Done\n- the modules were checked"),
               ) as llm, HttpChatClient(llm.base_url) as client:
        summarizer = LLMSummarizer(client, model="summary-model")
        with Engine(store, model="gpt-4o-mini", context_length=WINDOW, summarizer=summarizer,
                    background_precompact=False) as engine:
            rt = engine.open_session(new=True)
            reports = []
            for i in range(24):
                if reports and not replies:
                    break
                prepared = rt.prepare(tool_turn(i, size=250), system_prompt=SYSTEM)
                rt.record(answer(i))
                if prepared.compaction is not None:
                    reports.append(prepared.compaction)
                    if replies:  # the first failure: let its cooldown run out at once
                        replies.clear()
                        rt.checkpointer.trigger.guard.cooldown_until = 0.0
                        reports.clear()
            asked = len(llm.llm.requests)
    assert reports and reports[0].summarizer == "llm:summary-model"
    assert asked == 2  # the failure, then the retry after the cooldown
