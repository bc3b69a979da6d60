"""Under a tight budget the builtin summary keeps the facts a coding run needs to continue: the
file it changed (dropped before Done and Blocked, a run's three edits of match.c left a summary
that read as if the edit never went through) and the task's substance when the task itself is
not kept verbatim (cut to 120 characters of harness boilerplate before)."""

from __future__ import annotations

from refold.compaction.builtin import GOAL_FLOOR_CHARS, _fit, task_text

TITLE = "Incorrect aliasing of iso when using match"


def count(text: str) -> int:
    return max(1, len(text) // 4)


def sections() -> dict[str, list[str]]:
    return {
        "goal": ["Fix the issue: " + TITLE + ". " + "The compiler accepts it. " * 30],
        "done": ["`make` → ok"],
        "blocked": ["`make test` → 1 failed"],
        "files": ["`/workspace/ponyc/src/libponyc/expr/match.c` — modified, read"],
        "next_steps": ["Fix the still-failing `make test`"],
        "in_progress": ["Last assistant step: rebuilding"],
        "critical": ["Compacted so far: 40 messages"],
    }


def test_the_modified_file_outlasts_done() -> None:
    fitted, _ = _fit(sections(), "en", 70, count)  # room for two of the three facts
    assert fitted.get("files") and "match.c" in fitted.get("files")[0]
    assert fitted.get("blocked") and not fitted.get("done")


def test_a_goal_not_kept_elsewhere_keeps_its_substance() -> None:
    fitted, _ = _fit(sections(), "en", 60, count, GOAL_FLOOR_CHARS)
    goal = fitted.get("goal")[0]
    assert TITLE in goal and len(goal) > 250  # far beyond the old 120 characters


def test_the_task_block_is_the_goal_not_the_harness_text() -> None:
    text = ("<uploaded_files>\n/workspace/ponyc\n</uploaded_files>\nI've uploaded a C code "
            f"repository. Consider the following issue description:\n\n<issue_description>\n"
            f"{TITLE}\nI don't think a field should be consumable.\n</issue_description>\n\n"
            "Can you help me implement the necessary changes?")
    assert task_text(text).startswith(TITLE)
    assert task_text("Fix the bug in <b>bold</b> rendering") == \
        "Fix the bug in <b>bold</b> rendering"


def test_the_task_after_swe_agents_demonstration_is_the_goal() -> None:
    """SWE-agent's templates send the worked example of another task and then this run's own
    issue in one user message: the message was skipped whole as the demonstration, and with it
    the task (6 of 56 cuts of the bench lost it)."""
    from refold.compaction import compact

    demo = ("Here is a demonstration of how to correctly accomplish this task.\nIt is included "
            "to show you how to correctly use the interface.\n--- DEMONSTRATION ---\nAnother "
            "issue about marshmallow TimeDelta rounding.\n" + "edit 1:1\nprint('x')\n" * 200
            + "--- END OF DEMONSTRATION ---\n\nWe're currently solving the following issue "
            "within our repository. Here's the issue text:\nISSUE:\nPixel Representation "
            "attribute should be optional for pixel data handler\n")
    messages = [{"role": "system", "content": "SETTING: you are an autonomous programmer."},
                {"role": "user", "content": demo}]
    for i in range(30):
        messages += [{"role": "assistant", "content": f"Step {i}.\n```\nopen file{i}.py\n```"},
                     {"role": "user", "content": f"[File: /repo/file{i}.py (300 lines total)]\n"
                      + "line of code\n" * 60}]
    result = compact(messages, context_length=20_000, target_tokens=3_000, model="gpt-4o")
    text = "\n".join(str(m.get("content")) for m in result.messages)
    assert "Pixel Representation attribute should be optional" in text


def test_a_decision_the_user_states_is_a_key_decision() -> None:
    """"We decided to pin numpy to 1.26.4" said by the user left Key Decisions at "None" (only
    the assistant's sentences were read for decisions); an explanation with "because" alone
    is not one."""
    from refold.compaction import compact

    messages = [{"role": "system", "content": "sys"},
                {"role": "user", "content": "Set up the CI for the data project."}]
    for i in range(20):
        said = f"Log {i}: " + "ok line " * 80
        if i == 5:
            said = "We decided to pin numpy to 1.26.4 because 2.0 breaks pandas. Continue."
        if i == 7:
            said = "It fails because the runner is slow. Continue."
        messages += [{"role": "assistant", "content": f"Running step {i}."},
                     {"role": "user", "content": said}]
    report = compact(messages, context_length=8000, target_tokens=1500, model="gpt-4o").report
    decisions = (report.summary or "").split("## Key Decisions")[1].split("##")[0]
    assert "pin numpy to 1.26.4" in decisions
    assert "runner is slow" not in decisions
