"""Under a budget too small for one item of each section, the builtin summary keeps what tells
the truth about the work longest: a blocked command, the newest outcome, the newest change.
It used to keep the whole goal and drop every one of those first: at a quarter of the public
trajectories' size the summary said nothing of the last check (2 of 8 right) and named 11 of 53
written files."""

from __future__ import annotations

from refold.compaction.builtin import _fit
from refold.tokens.models import get_counter

COUNT = get_counter("gpt-4o").count_text


def sections() -> dict[str, list[str]]:
    return {
        "goal": ["Fix the TimeDelta rounding issue: " + "the serialized value is off by one " * 8],
        "constraints": [f"- Remember instruction {i}: one command at a time." for i in range(9)],
        "done": [f"`python step_{i}.py` → ok" for i in range(10)] + ["`pytest tests/` → 42 passed"],
        "blocked": ["`pytest tests/test_fields.py` → 1 failed"],
        "files": ["`src/fields.py` — modified", "`README.rst` — read", "`setup.py` — read"],
        "next_steps": ["Fix the still-failing tests/test_fields.py"],
        "in_progress": ["Last assistant step: checking the rounding."],
    }


def test_a_tight_budget_keeps_the_outcomes_and_the_change() -> None:
    fitted, _ = _fit(sections(), "en", 90, COUNT)
    assert fitted.get("blocked") == ("`pytest tests/test_fields.py` → 1 failed",)
    assert fitted.get("done") == ("`pytest tests/` → 42 passed",)  # the newest outcome
    assert fitted.get("files") == ("`src/fields.py` — modified",)  # the change, not a read
    assert fitted.get("goal")  # shortened, never dropped
    assert not fitted.get("constraints")


def test_a_budget_for_everything_keeps_everything() -> None:
    fitted, _ = _fit(sections(), "en", 5_000, COUNT)
    assert len(fitted.get("done")) == 11 and len(fitted.get("constraints")) == 9
