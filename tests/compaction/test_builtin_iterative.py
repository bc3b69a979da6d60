"""The builtin summary across repeated compactions: each section stays true and bounded.

An agent resuming from the summary must know the goal, what is done, what is still broken,
which files matter and what to do next — after the tenth compaction as after the first.
"""

from __future__ import annotations

import json
from typing import Any

from refold.compaction import compact
from refold.compaction.anchors import extract_anchors, select_anchors
from refold.compaction.builtin import BuiltinSummarizer
from refold.compaction.policy import CompactionPolicy
from refold.compaction.summarizer import SummaryRequest
from refold.compaction.summary import detect_language, parse_body, unwrap_summary
from refold.messages.model import content_text
from refold.tokens import get_counter

COUNTER = get_counter("gpt-4o")
Msg = dict[str, Any]


def call(cid: str, name: str, **args: Any) -> Msg:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": cid, "type": "function", "function": {"name": name,
                                                     "arguments": json.dumps(args)}}]}


def result(cid: str, text: str) -> Msg:
    return {"role": "tool", "tool_call_id": cid, "content": text}


def _diff(path: str) -> str:
    return (f"--- a/{path}\n+++ b/{path}\n@@ -1,3 +1,3 @@\n-    now = datetime.utcnow()\n"
            "+    now = datetime.now(timezone.utc)\n")


LOG = "\n".join(f"log line {i}" for i in range(60))


def fix_round(i: int, module: str) -> list[Msg]:
    """One "Next: tests/test_X.py" round: read, fail, patch, pass — like the demo."""
    test, src = f"tests/test_{module}.py", f"src/app/{module}.py"
    return [
        {"role": "user", "content": f"Next: {test}."},
        call(f"r{i}", "read_file", path=src),
        result(f"r{i}", f'"""{module}"""\n' + LOG),
        call(f"m{i}", "memory", action="add", target="user", content=f"likes {module}"),
        result(f"m{i}", '{"success": true, "target": "user"}'),
        call(f"t{i}", "terminal", cmd=f"pytest -q {test}"),
        result(f"t{i}", LOG + f"\nFAILED {test}::test_{module}_case - ModuleNotFoundError: "
                              f"No module named '{module}_legacy'\n1 failed in 0.3s"),
        {"role": "assistant", "content": f"The cause is `import {module}_legacy` — "
                                         f"ModuleNotFoundError: No module named "
                                         f"'{module}_legacy'. Minimal fix:",
         "tool_calls": [{"id": f"p{i}", "type": "function", "function": {
             "name": "apply_patch", "arguments": json.dumps({"path": src,
                                                             "patch": _diff(src)})}}]},
        result(f"p{i}", _diff(src) + "Patch applied: 1 file changed."),
        call(f"g{i}", "terminal", cmd="git diff --stat -p"),
        result(f"g{i}", _diff(src)),
        call(f"u{i}", "terminal", cmd=f"pytest -q {test}"),
        result(f"u{i}", LOG + "\n12 passed in 0.4s"),
        {"role": "assistant", "content": f"{test} passes now."},
    ]


MODULES = ["dates", "version", "config", "db", "tax", "payments", "reports", "currency"]
GOAL = ("After upgrading to Python 3.12 the test suite of acme-billing fails. Fix it, please "
        "keep diffs minimal.")


def session(rounds: int) -> list[Msg]:
    msgs: list[Msg] = [{"role": "system", "content": "You are a coding agent."},
                       {"role": "user", "content": GOAL},
                       {"role": "assistant", "content": "I'll fix one test file at a time."}]
    for i in range(rounds):
        msgs += fix_round(i, MODULES[i % len(MODULES)])
    return msgs


def compact_repeatedly(rounds: int, every: int = 2) -> tuple[list[Msg], list[Any]]:
    """Grow the history round by round and compact it every ``every`` rounds (≥ 3 times)."""
    policy = CompactionPolicy(output_reserve_tokens=0)
    history = session(0)
    reports: list[Any] = []
    for i in range(rounds):
        history = history + fix_round(i, MODULES[i % len(MODULES)])
        if (i + 1) % every == 0:
            out = compact(history, context_length=6_000, policy=policy, counter=COUNTER,
                          target_tokens=2_500)
            assert out.report.changed, out.report.reason
            history, reports = out.messages, [*reports, out.report]
    return history, reports


def test_anchor_index_stays_verbatim_over_repeated_compactions() -> None:
    _, reports = compact_repeatedly(8)
    assert len(reports) >= 3
    last = reports[-1]
    _, parsed = unwrap_summary(last.summary)
    assert parsed == list(last.anchors)  # what is written is what is carried
    for anchor in last.anchors:
        assert not anchor.startswith(("- ", "`", "a/", "b/")), anchor
        assert "`" not in anchor and "Minimal fix" not in anchor, anchor
        assert "full output in the session ledger" not in anchor, anchor
    # the exact failure line survives verbatim (in the index, or in the body for free)
    assert "FAILED tests/test_reports.py::test_reports_case - ModuleNotFoundError: No module " \
           "named 'reports_legacy'" in last.summary
    index = last.summary.split("## Anchor Index", 1)[1]
    assert "- - " not in index and "a/src/" not in index


def test_carried_legacy_anchors_are_repaired_and_fresh_ones_never_come_from_a_summary() -> None:
    legacy = ["- - - - `FAILED tests/a.py::t - KeyError: 'x'`", "IntegrityError: UNIQUE`"]
    chosen = select_anchors([], budget_tokens=500, count_text=COUNTER.count_text,
                            carried=legacy)
    assert chosen == ["FAILED tests/a.py::t - KeyError: 'x'", "IntegrityError: UNIQUE"]
    summary = {"role": "user", "_summary": True,
               "content": "[CONTEXT SUMMARY — REFERENCE ONLY] x\n\n## Anchor Index (exact, "
                          "verbatim)\n- `FAILED tests/b.py::t - E`"}
    patch = call("p", "apply_patch", path="src/x.py", patch=_diff("src/x.py"))
    texts = {a.text for a in extract_anchors([summary, patch, result("p", _diff("src/x.py"))])}
    assert "src/x.py" in texts
    assert not any(t.startswith(("- ", "a/", "b/")) or "`" in t for t in texts), texts


def _request(turns: list[Msg], previous: str | None = None, prefix: list[Msg] | None = None,
             language: str = "en", budget: int = 3000) -> SummaryRequest:
    return SummaryRequest(turns=turns, pruned_turns=turns, prefix=prefix or turns,
                          previous_summary=previous, language=language, budget_tokens=budget,
                          counter=COUNTER)


def _chain(spans: list[list[Msg]]) -> list[Any]:
    """Summarize span after span, each update built on the previous body (pure builtin)."""
    bodies: list[str] = []
    seen: list[Msg] = []
    for span in spans:
        seen = seen + span
        draft = BuiltinSummarizer().summarize(_request(span, bodies[-1] if bodies else None,
                                                       prefix=seen))
        bodies.append(draft.body)
    return [parse_body(b) for b in bodies]


FAIL = [call("f1", "terminal", cmd="pytest -q tests/test_dates.py"),
        result("f1", "E   DeprecationWarning: utcnow() is deprecated\nexit code 1"),
        call("f2", "terminal", cmd="pytest -q tests/test_db.py"),
        result("f2", "FAILED tests/test_db.py::test_ts - DeprecationWarning: adapter\n"
                     "exit code 1"),
        call("f3", "terminal", cmd="ruff check src"),
        result("f3", "src/a.py:1:1: F401 unused import\nexit code 1")]


def test_blocked_is_settled_by_a_later_success_in_a_later_compaction() -> None:
    later = [{"role": "user", "content": "Next: tests/test_dates.py."},
             call("s1", "terminal", cmd="pytest -q tests/test_dates.py"),
             result("s1", "13 passed in 4.2s\nexit code 0")]
    whole = [call("s2", "terminal", cmd="pytest -q"), result("s2", "204 passed in 9s")]
    first, second, third = _chain([[{"role": "user", "content": GOAL}, *FAIL], later, whole])
    assert len(first.get("blocked")) == 3
    blocked = " ".join(second.get("blocked"))
    assert "test_dates" not in blocked and "test_db" in blocked and "ruff check src" in blocked
    done = " ".join(second.get("done"))
    assert "`pytest -q tests/test_dates.py` → 13 passed" in done and "fixed:" in done
    # a whole unfiltered run of the same program settles its per-file failures, not ruff's
    assert [b for b in third.get("blocked")] == [b for b in second.get("blocked")
                                                if "ruff" in b]


def test_goal_is_the_original_request_plus_the_current_one_never_nudges() -> None:
    spans = [[{"role": "user", "content": GOAL}, *fix_round(0, "dates")],
             fix_round(1, "version"), fix_round(2, "config"),
             [{"role": "user", "content": "Now add a CSV export of invoices by month, with "
                                          "the amounts rounded to cents."},
              {"role": "assistant", "content": "Starting on the export."}],
             fix_round(3, "db")]
    results = _chain(spans)
    for sections in results:
        goal = sections.get("goal")
        assert goal[0] == GOAL and len(goal) <= 2, goal
        assert not any("Next:" in g for g in goal), goal
    assert results[-1].get("goal")[1] == ("Current request: Now add a CSV export of invoices "
                                          "by month, with the amounts rounded to cents.")
    assert any("Next: tests/test_db.py." in i for i in results[-1].get("in_progress"))


def test_relevant_files_are_real_paths_one_line_each() -> None:
    results = _chain([[{"role": "user", "content": GOAL}, *fix_round(0, "dates")],
                      fix_round(1, "version"), fix_round(2, "dates")])
    files = results[-1].get("files")
    paths = [f.split("`")[1] for f in files]
    assert len(paths) == len(set(paths)), files
    assert "memory" not in paths and "user" not in paths
    assert not any(p.startswith(("a/", "b/")) for p in paths), paths
    assert set(paths[:2]) == {"src/app/dates.py", "tests/test_dates.py"}  # most recent first
    assert "`src/app/dates.py` — modified, read" in files


def test_critical_context_keeps_one_running_bookkeeping_line_each() -> None:
    remember = [{"role": "user", "content": "Remember: our CI runs with -W error."}]
    results = _chain([[{"role": "user", "content": GOAL}, *remember, *fix_round(0, "dates")],
                      fix_round(1, "version"), fix_round(2, "config")])
    critical = results[-1].get("critical")
    span_lines = [c for c in critical if c.startswith("Compacted so far")]
    tool_lines = [c for c in critical if c.startswith("Tools used")]
    assert span_lines == ["Compacted so far: 44 messages (5 user, 21 assistant, 18 tool "
                          "results)"]
    assert tool_lines == ["Tools used: apply_patch ×3, memory ×3, read_file ×3, terminal ×9"]
    assert critical[0] == "Remember: our CI runs with -W error."
    assert not any(c.startswith(("Replaced", "Tools used")) and c not in tool_lines
                   for c in critical)


TODO = json.dumps({"todos": [
    {"id": "1", "content": "Reproduce the failures", "status": "completed"},
    {"id": "2", "content": "Fix each Python 3.12 incompatibility", "status": "in_progress"},
    {"id": "3", "content": "Full green run", "status": "pending"}]})


def test_next_steps_come_from_todos_plans_and_what_is_still_failing() -> None:
    span = [{"role": "user", "content": GOAL},
            call("td", "todo", todos=json.loads(TODO)["todos"]), result("td", TODO),
            *FAIL[:2],
            {"role": "assistant", "content": "Next I'll switch dates.py to timezone-aware "
                                             "datetimes."}]
    steps = BuiltinSummarizer().summarize(_request(span)).body.split("## Next Steps")[1]
    steps = steps.split("##")[0]
    assert "Todo (in_progress): Fix each Python 3.12 incompatibility" in steps
    assert "Todo (pending): Full green run" in steps and "Reproduce" not in steps
    assert "Next I'll switch dates.py to timezone-aware datetimes." in steps
    assert "Fix the still-failing `pytest -q tests/test_dates.py`" in steps
    assert "Continue with the latest message" not in steps
    plain = BuiltinSummarizer().summarize(_request([{"role": "user", "content": "Hello there, "
                                                                                  "how are you"},
                                                    {"role": "assistant", "content": "Fine."}]))
    assert "Continue with the latest message after this summary." in plain.body


def test_done_lists_outcomes_latest_per_command_not_reads() -> None:
    rounds = [*fix_round(0, "dates"),
              call("again", "terminal", cmd="pytest -q tests/test_dates.py"),
              result("again", "14 passed in 0.5s")]
    done = parse_body(BuiltinSummarizer().summarize(_request(rounds)).body).get("done")
    assert not any("read_file" in d or "git diff" in d for d in done), done
    runs = [d for d in done if d.startswith("`pytest -q tests/test_dates.py`")]
    assert runs == ["`pytest -q tests/test_dates.py` → 14 passed in 0.5s (fixed: FAILED "
                    "tests/test_dates.py::test_dates_case - ModuleNotFoundError: No module "
                    "named 'dates_legacy')"]
    assert any(d.startswith("apply_patch `src/app/dates.py` →") for d in done)


def test_language_follows_the_prose_not_the_identifiers() -> None:
    english = [{"role": "user", "content": "Please fix the failing invoice tests, keep diffs "
                                           "minimal and run pytest quietly afterwards."}] * 4
    stretch = [{"role": "user", "content": "接下来请用中文回答。我们需要给发票加一个导出功能。"},
               {"role": "user", "content": "继续：金额格式，保留两位小数。"},
               {"role": "user", "content": "继续：时区处理和空月份处理。"}]
    assert detect_language(english + stretch + english[:1]) == "en"
    chinese = [{"role": "user", "content": "修复 `src/app/login.py` 里的 `AuthError`，"
                                           "然后运行 pytest tests/test_login.py。"}] * 3
    assert detect_language(chinese) == "zh"
    body = BuiltinSummarizer().summarize(_request(chinese, language="zh")).body
    assert body.startswith("## 目标")


def test_repeated_compaction_is_deterministic_and_bounded() -> None:
    first_history, first = compact_repeatedly(8)
    second_history, second = compact_repeatedly(8)
    assert [r.summary for r in first] == [r.summary for r in second]
    assert first_history == second_history
    for report in first:
        summary = report.summary or ""
        assert COUNTER.count_text(summary) < 2_500
        assert summary.count("Compacted so far") == 1
    text = "\n".join(content_text(m) for m in first_history)
    assert text.count("[CONTEXT SUMMARY") == 1


def test_a_filtered_success_settles_only_its_own_failure() -> None:
    from refold.compaction.activity import resolves

    assert not resolves("pytest tests/test_login.py -k case4", "pytest tests/test_login.py -k case3")
    assert not resolves("pytest tests/a.py::test_y", "pytest tests/a.py::test_x")
    assert resolves("pytest tests/a.py", "pytest -q tests/a.py::test_x")
    assert resolves("pytest -q", "pytest -q tests/test_db.py")
    assert not resolves("pytest -q", "ruff check src")
    span = [call("a", "terminal", command="pytest tests/test_login.py -k case3"),
            result("a", "KeyError: 'user3'\nexit code 1"),
            call("b", "terminal", command="pytest tests/test_login.py -k case4"),
            result("b", "1 passed in 0.5s\nexit code 0")]
    body = parse_body(BuiltinSummarizer().summarize(_request(span)).body)
    assert [b.split(" →")[0] for b in body.get("blocked")] == [
        "`pytest tests/test_login.py -k case3`"]


def test_files_named_in_the_first_request_stay_relevant() -> None:
    head = [{"role": "user", "content": "Fix the login bug in src/app/login.py, please."}]
    span = [{"role": "assistant", "content": "Looking."},
            call("a", "terminal", command="pytest tests/test_login.py"),
            result("a", "1 passed\nexit code 0")]
    draft = BuiltinSummarizer().summarize(_request(span, prefix=head + span))
    assert "`src/app/login.py` — mentioned" in parse_body(draft.body).get("files")


def test_a_plan_already_acted_on_is_not_a_next_step() -> None:
    span = [{"role": "user", "content": GOAL},
            {"role": "assistant", "content": "Next I'll fix them one file at a time."},
            *FAIL[:2],
            {"role": "assistant", "content": "接下来我会把 dates.py 改成带时区的 datetime。"}]
    steps = parse_body(BuiltinSummarizer().summarize(_request(span)).body).get("next_steps")
    assert "接下来我会把 dates.py 改成带时区的 datetime。" in steps
    assert not any("one file at a time" in s for s in steps), steps


def test_carried_anchor_keeps_inner_code_quotes() -> None:
    from refold.compaction.anchors import carried_anchor

    assert carried_anchor("echo `date` > stamp.txt") == "echo `date` > stamp.txt"
    assert carried_anchor("- - `docs/export.md`") == "docs/export.md"


def test_critical_context_keeps_config_values_but_never_credentials() -> None:
    span = [{"role": "user", "content": "The staging database is db.staging.internal:5433. "
                                        "Its password is hunter2, DB_PASSWORD=hunter2."},
            {"role": "assistant", "content": "Noted."}]
    critical = parse_body(BuiltinSummarizer().summarize(_request(span)).body).get("critical")
    assert "The staging database is db.staging.internal:5433." in critical
    assert not any("hunter2" in c for c in critical)
    env = result("x", "export API_TOKEN=abc123 LOG_LEVEL=debug\n"
                      "postgres://app:s3cret@db:5432/x")
    anchors = {a.text for a in extract_anchors([*span, env])}
    assert "LOG_LEVEL=debug" in anchors
    assert not any("abc123" in a or "s3cret" in a or "hunter2" in a for a in anchors), anchors
