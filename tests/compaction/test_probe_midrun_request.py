"""A request sent in the middle of a long autonomous run (a person's "also check X", a harness's
error notice) and the task before it, at the sizes real agent runs have.

The tail reached back to the last real user message wherever it was: once a run had one
mid-run, every later plan kept the same tail, no checkpoint could move the view forward and
the context grew past the window, silently (OpenHands multi-SWE-bench, an 8K window: 17K tokens
sent). The task itself, too large for the protected head, went to the summary cut to 120
characters ("<uploaded_files> … I've uploaded a C code repository in the directory p…"), the
issue nowhere; and a run whose one request was the whole task was not compacted at all under a
tight budget (47 → 47 messages, a smaller window giving a larger result)."""

from __future__ import annotations

import json
from typing import Any

import refold
from refold.compaction import compact
from refold.compaction.structure import provider_problems
from refold.runtime import Engine

NOTICE = "ERROR: Parameter 'command' is expected to be one of ['view', 'create']."
TITLE = "CommandParser ignores parent default options when parsing leaf command"
TASK = ("<uploaded_files>\n/workspace/ponyc\n</uploaded_files>\nI've uploaded a C code "
        "repository in the directory ponyc. Consider the following issue description:\n\n"
        f"<issue_description>\n{TITLE}\nConsider the following setup, "
        + "where the leaf command never sees the parent's default option. " * 40
        + "\n</issue_description>\n\nCan you help me implement the necessary changes? "
        + "Follow these steps to resolve the issue. " * 30)


def _step(i: int, lines: int = 40) -> list[dict[str, Any]]:
    call = {"id": f"c{i}", "type": "function", "function": {
        "name": "bash", "arguments": json.dumps({"command": f"cat part{i}.txt"})}}
    return [{"role": "assistant", "content": f"step {i}", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{i}",
             "content": f"line {i}: " + " ".join(f"tok{j}" for j in range(lines))}]


def _run(task: str, steps: int, notice_at: int | None) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."},
                                      {"role": "user", "content": task}]
    for i in range(steps):
        if i == notice_at:
            messages.append({"role": "user", "content": NOTICE})
        messages += _step(i)
    return messages


def test_a_request_mid_run_is_kept_ahead_of_the_summary() -> None:
    messages = _run("Fix the failing test in src/app.py", 60, notice_at=40)
    result = compact(messages, context_length=8000)
    report, out = result.report, result.messages
    assert report.status == "ok" and report.fits and report.summarized > 0
    texts = [m.get("content") for m in out]
    at = texts.index(NOTICE)  # verbatim, once, right before the summary
    assert texts.count(NOTICE) == 1 and out[at + 1].get("_summary")
    # the tail did not stretch back to it: the work around it is summarized
    assert "step 39" not in texts and "step 41" not in texts and out[-1] == messages[-1]
    # the summary says it came during the work (it is no new, unstarted request)
    assert "came in during this work" in (report.summary or "")
    for provider in ("openai", "anthropic", "strict"):
        assert provider_problems(out, provider) == [], provider


def test_a_task_too_large_for_the_head_and_a_notice_mid_run() -> None:
    # the task is over the protected head's share; a notice mid-run is the last user message
    messages = _run(TASK, 30, notice_at=12)
    result = compact(messages, context_length=6000)
    out = [m.get("content") for m in result.messages]
    assert TASK in out and NOTICE in out  # both verbatim, ahead of the summary
    assert out.index(TASK) < out.index(NOTICE) < next(
        i for i, m in enumerate(result.messages) if m.get("_summary"))
    for provider in ("openai", "anthropic", "strict"):
        assert provider_problems(result.messages, provider) == [], provider


def test_a_summarized_task_keeps_its_issue_in_the_goal() -> None:
    # the window is too small to keep the task whole: its substance is the goal, not its
    # first 120 characters of harness boilerplate
    messages = _run(TASK, 30, notice_at=12)
    for window in (1000, 2000):
        result = compact(messages, context_length=window)
        assert TASK not in [m.get("content") for m in result.messages]
        goal = (result.report.summary or "").split("## Goal", 1)[1].split("##", 1)[0]
        assert TITLE in goal and "I've uploaded" not in goal, window


def test_a_smaller_window_never_gives_a_larger_result() -> None:
    # one request that is the whole task, then the work: nothing was summarized under a tight
    # budget (the tail reached back to the request), so the result was the input
    messages = _run(TASK, 40, notice_at=None)
    sizes = {w: compact(messages, context_length=w).report for w in (1000, 2000, 4000, 8000)}
    for window, report in sizes.items():
        assert report.summarized > 0, window
        assert report.tokens_after < report.tokens_before / 2, window
    assert sizes[1000].tokens_after <= sizes[8000].tokens_after + 400


def test_the_engine_keeps_compacting_after_a_request_mid_run(tmp_path: Any) -> None:
    store = refold.open(str(tmp_path / "r.db"))
    engine = Engine(store, model="gpt-4o-mini", context_length=8000,
                    background_precompact=False)
    try:
        rt = engine.open_session(new=True, title="midrun")
        rt.prepare([{"role": "user", "content": "Fix the failing test in src/app.py"}],
                   system_prompt="You are a coding agent.")
        compactions, largest = 0, 0
        for k in range(60):
            if k == 5:
                rt.prepare([{"role": "user", "content": NOTICE}])
            step = _step(k, lines=150)
            rt.record(step[0])
            prepared = rt.prepare([step[1]])
            compactions += prepared.compaction is not None
            largest = max(largest, prepared.tokens)
        assert compactions >= 5 and largest < 8000
    finally:
        engine.close()
        store.close()


def test_a_request_with_nothing_summarized_after_it_stays_after_the_summary() -> None:
    # The tail reached exactly to the message after the request: moved ahead of the summary,
    # the summary said "14 of the 14 messages summarized here came before it, the rest after"
    # (there was no rest) and the live request sat above "the requests in it were handled"
    # (seen with the real Codex CLI through refold serve)
    for steps, at, window in ((12, 8, 3000), (20, 13, 5250)):
        messages = _run("Fix the failing test in src/app.py", steps, notice_at=at)
        result = compact(messages, context_length=window)
        out = result.messages
        assert result.report.summarized > 0
        at_summary = next(i for i, m in enumerate(out) if m.get("_summary"))
        assert out[at_summary + 1].get("content") == NOTICE  # the tail's first message
        assert [m.get("content") for m in out].count(NOTICE) == 1
        assert "came in during this work" not in (result.report.summary or "")
        for provider in ("openai", "anthropic", "strict"):
            assert provider_problems(out, provider) == [], provider
