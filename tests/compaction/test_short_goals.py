"""A short request is a goal, in any language: "Fix flaky tests" or 修复登录页面的bug used to be
taken for a nudge ("ok", "continue") by its length alone, and the summary said "Goal: None."."""

from __future__ import annotations

import json
from typing import Any

import pytest

from refold.compaction import compact
from refold.compaction.builtin import is_nudge

REQUESTS = ["Fix flaky tests", "Port it to Rust", "Add unit tests", "修复登录页面的bug",
            "把这个项目移植到Rust", "ログインのバグを直して", "y axis label is wrong",
            "fine-tune the model", "right-align the header", "可以帮我修复这个", "对这个函数加测试"]
NUDGES = ["ok", "k", "continue", "please continue", "yes please", "Thanks!", "go on", "lgtm",
          "继续", "继续吧", "好的", "是的", "次へ", "お願いします", "👍", "right.", "Next: tests/a.py.",
          "继续：测试。"]


@pytest.mark.parametrize("text", REQUESTS)
def test_a_short_request_is_no_nudge(text: str) -> None:
    assert not is_nudge(text)


@pytest.mark.parametrize("text", NUDGES)
def test_a_nudge_is_still_a_nudge(text: str) -> None:
    assert is_nudge(text)


def session(ask: str, turns: int = 40) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."},
                                      {"role": "user", "content": ask}]
    for i in range(turns):
        call = {"id": f"c{i}", "type": "function",
                "function": {"name": "bash", "arguments": json.dumps({"command": f"cat f{i}.py"})}}
        messages += [{"role": "assistant", "content": f"Step {i}.", "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": f"c{i}", "content": "x = 1\n" * 80}]
    messages += [{"role": "user", "content": "continue"}]
    return messages


@pytest.mark.parametrize("ask", ["Fix login bug", "修复登录页面的bug", "ログインのバグを直して"])
def test_the_summary_names_a_short_request_as_its_goal(ask: str) -> None:
    result = compact(session(ask), context_length=6000)
    summary = result.report.summary
    assert result.report.summarized > 0 and summary
    goal = summary.split("##")[1]  # the first section is the goal, in the summary's language
    assert ask in goal, summary
