"""The pieces of the pipeline: prune, anchors, the builtin summarizer, the summary framing."""

from __future__ import annotations

import json
from typing import Any

from refold.compaction.anchors import extract_anchors, select_anchors
from refold.compaction.builtin import BuiltinSummarizer
from refold.compaction.prune import (
    PruneStats,
    one_line_summary,
    prune_outside_tail,
    truncate_arguments,
)
from refold.compaction.summarizer import SummaryRequest
from refold.compaction.summary import (
    END_MARKER,
    PREFIX,
    detect_language,
    parse_body,
    strip_think,
    unwrap_summary,
    wrap_summary,
)
from refold.tokens import get_counter

COUNTER = get_counter("gpt-4o")


def call(cid: str, name: str, **args: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": cid, "type": "function", "function": {"name": name,
                                                     "arguments": json.dumps(args)}}]}


def result(cid: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": cid, "content": text}


CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Migrate the billing service to Postgres 16. Never drop the "
                                "legacy table. Use alembic for migrations."},
    call("c1", "terminal", command="alembic upgrade head"),
    result("c1", "INFO running upgrade\nsqlalchemy.exc.OperationalError: could not connect "
                 "to server\nexit code 1"),
    {"role": "assistant", "content": "The database was down. I decided to start it with "
                                     "docker compose because the CI uses it too."},
    call("c2", "patch", path="billing/migrations/env.py", diff="..."),
    result("c2", "patched billing/migrations/env.py\nexit code 0"),
    call("c3", "terminal", command="alembic upgrade head"),
    result("c3", "INFO upgraded to 3f2a9c1\nexit code 0"),
    call("c4", "terminal", command="pytest tests/billing -q"),
    result("c4", "FAILED tests/billing/test_invoice.py::test_totals - AssertionError: 41 != 42"
                 "\nexit code 1"),
    {"role": "assistant", "content": "Migration done. Next I'll fix test_totals in "
                                     "tests/billing/test_invoice.py."},
]


def _request(turns: list[dict[str, Any]], budget: int = 2000, previous: str | None = None,
             language: str = "en", prefix: list[dict[str, Any]] | None = None
             ) -> SummaryRequest:
    return SummaryRequest(turns=turns, pruned_turns=turns, prefix=prefix or turns,
                          previous_summary=previous, language=language, budget_tokens=budget,
                          counter=COUNTER)


def test_builtin_summary_is_useful() -> None:
    body = BuiltinSummarizer().summarize(_request(CONVERSATION[2:], prefix=CONVERSATION)).body
    sections = parse_body(body)
    assert sections.get("goal")[0].startswith("Migrate the billing service to Postgres 16")
    assert any("Never drop the legacy table" in c for c in sections.get("constraints"))
    done = " ".join(sections.get("done"))
    assert "alembic upgrade head" in done and "Migration done" in done
    blocked = " ".join(sections.get("blocked"))
    assert "AssertionError: 41 != 42" in blocked
    assert "OperationalError" not in blocked  # the same command succeeded later
    assert any("docker compose" in d for d in sections.get("decisions"))
    files = " ".join(sections.get("files"))
    assert "billing/migrations/env.py" in files and "modified" in files
    assert any("fix test_totals" in n for n in sections.get("next_steps"))
    # the settled failure is remembered next to its fix, not as a live critical error
    assert any("alembic upgrade head" in d and "fixed:" in d and "OperationalError" in d
               for d in sections.get("done"))
    assert not any("OperationalError" in c for c in sections.get("critical"))


def test_builtin_summary_is_deterministic_and_respects_its_budget() -> None:
    big = CONVERSATION[2:] * 40
    first = BuiltinSummarizer().summarize(_request(big, budget=300)).body
    assert first == BuiltinSummarizer().summarize(_request(big, budget=300)).body
    assert COUNTER.count_text(first) <= 330


def test_builtin_update_keeps_the_previous_summary() -> None:
    previous = BuiltinSummarizer().summarize(_request(CONVERSATION[2:6],
                                                      prefix=CONVERSATION[:6])).body
    later = [{"role": "user", "content": "Now add an index on invoices.customer_id."},
             call("c9", "terminal", command="alembic revision -m add_index"),
             result("c9", "Generating migrations/versions/9b1_add_index.py\nexit code 0")]
    body = BuiltinSummarizer().summarize(_request(later, previous=previous)).body
    sections = parse_body(body)
    assert sections.get("goal")[0].startswith("Migrate the billing service")
    done = " ".join(sections.get("done"))
    assert "alembic revision -m add_index" in done


def test_chinese_headings_and_framing() -> None:
    zh = [{"role": "user", "content": "请把账单服务迁移到 Postgres 16，不要删除旧表。"},
          {"role": "assistant", "content": "好的，我决定使用 alembic。"}]
    assert detect_language(zh) == "zh"
    assert detect_language([{"role": "user", "content": "ログインのバグを修正してください"}]) == "ja"
    assert detect_language(CONVERSATION) == "en"
    body = BuiltinSummarizer().summarize(_request(zh, language="zh")).body
    assert body.startswith("## 目标") and "## 约束与偏好" in body
    text = wrap_summary(body, ["Postgres 16"], "zh")
    assert text.startswith(PREFIX) and text.endswith(END_MARKER) and "摘要结束" in text
    assert unwrap_summary(text) == (body, ["Postgres 16"])


def test_strip_think() -> None:
    assert strip_think("<think>hmm</think>## Goal\n- x") == "## Goal\n- x"
    assert strip_think("## Goal\n<thinking>a\nb</thinking>- x") == "## Goal\n- x"
    assert strip_think("<think>never closed") == ""


def test_one_line_summary_of_an_old_output() -> None:
    output = "\n".join(f"line {i}" for i in range(46)) + "\nexit code 0"
    line = one_line_summary("terminal", json.dumps({"command": "npm test"}), output)
    assert line.startswith("[terminal] ran `npm test` -> exit 0, 47 lines")
    err = one_line_summary("terminal", "{}", "Traceback\nValueError: bad value\nexit status 2")
    assert "exit 2" in err and "ValueError: bad value" in err


def test_truncated_arguments_stay_valid_json() -> None:
    args = json.dumps({"path": "a.py", "content": "x" * 5000, "items": list(range(100))})
    short = truncate_arguments(args, 500)
    assert len(short) <= 600 and json.loads(short)["path"] == "a.py"
    assert json.loads(truncate_arguments("not json " * 200, 100))["_truncated"]


def test_prune_dedups_and_summarizes_outside_the_tail_only() -> None:
    same = "identical output\n" * 50
    msgs = [call("a", "read_file", path="x.py"), result("a", same),
            call("b", "read_file", path="x.py"), result("b", same),
            call("c", "terminal", command="make"), result("c", "y\n" * 300)]
    stats = PruneStats()
    out = prune_outside_tail(msgs, 2, min_chars=200, args_max_chars=500, stats=stats)
    assert out[1]["content"].startswith("[Duplicate tool output") and "call b" in out[1]["content"]
    assert out[3]["content"] == same  # the newer copy is the one kept (here: in the tail)
    assert out[5] is msgs[5] and stats.deduplicated == 1
    assert msgs[1]["content"] == same  # input untouched


def test_anchors_are_verbatim_ranked_and_bounded() -> None:
    candidates = extract_anchors(CONVERSATION)
    texts = {a.text for a in candidates}
    assert "alembic upgrade head" in texts
    assert "billing/migrations/env.py" in texts
    assert any("AssertionError: 41 != 42" in t for t in texts)
    assert "3f2a9c1" in texts  # a revision id
    chosen = select_anchors(candidates, budget_tokens=40, count_text=COUNTER.count_text)
    assert sum(COUNTER.count_text(a) + 3 for a in chosen) <= 40
    assert chosen == select_anchors(extract_anchors(CONVERSATION), budget_tokens=40,
                                    count_text=COUNTER.count_text)
    full = select_anchors(candidates, budget_tokens=10_000, count_text=COUNTER.count_text)
    for a in full:  # no anchor is contained in another one
        assert not any(a != b and a in b for b in full)


def test_bulky_tail_outputs_are_downgraded_and_old_images_stripped() -> None:
    from refold.compaction.prune import IMAGE_PLACEHOLDER, downgrade_tail, strip_old_images

    tail = [call("t1", "terminal", command="cat big.log"), result("t1", "row\n" * 3000),
            call("t2", "terminal", command="ls"), result("t2", "a.py\n" * 100)]
    stats = PruneStats()
    out = downgrade_tail(tail, 0, ceiling_tokens=500, count=COUNTER.count_message, keep_from=2,
                         min_chars=200, stats=stats)
    assert out[1]["content"].startswith("[terminal] ran `cat big.log`")
    assert out[3] is tail[3] and stats.tail_downgraded == 1  # the latest unit stays verbatim
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    msgs = [{"role": "user", "content": [{"type": "text", "text": "old"}, image]},
            {"role": "assistant", "content": "seen"},
            {"role": "user", "content": [{"type": "text", "text": "new"}, image]}]
    out = strip_old_images(msgs, set(), stats)
    assert out[0]["content"][1] == {"type": "text", "text": IMAGE_PLACEHOLDER}
    assert out[2] is msgs[2] and stats.images_stripped == 1


def test_bad_input_is_a_clear_error_not_a_traceback() -> None:
    import pytest

    from refold.compaction import compact
    from refold.errors import InvalidInput, MessageValidationError

    with pytest.raises(InvalidInput, match="context_length"):
        compact([{"role": "user", "content": "x"}], context_length=0)
    with pytest.raises(MessageValidationError, match="message 1"):
        compact([{"role": "user", "content": "x"}, {"role": "wizard", "content": "y"}],
                context_length=1000)
    with pytest.raises(MessageValidationError):
        compact("not a list", context_length=1000)  # type: ignore[arg-type]


def test_summary_role_keeps_turns_alternating() -> None:
    from refold.compaction.boundaries import summary_role

    assert summary_role(None, "assistant") == "user"
    assert summary_role("system", "user") is None  # neither fits: shift or acknowledge
    assert summary_role("user", "user") == "assistant"
    assert summary_role("user", "assistant") is None
    assert summary_role("tool", "user") == "assistant"
    assert summary_role("tool", "assistant") == "user"
    assert summary_role("assistant", "assistant") == "user"
    assert summary_role("assistant", "user") is None


def test_acknowledgement_turn_when_no_single_role_fits() -> None:
    from refold.compaction import compact, provider_problems
    from refold.compaction.policy import CompactionPolicy

    # system, then only user/assistant pairs: the tail starts with a user turn and the cut
    # cannot move, so the summary (user) is followed by a short assistant acknowledgement
    msgs = [{"role": "system", "content": "s"}]
    for i in range(6):
        msgs += [{"role": "user", "content": f"question {i} " + "x " * 400},
                 {"role": "assistant", "content": f"answer {i} " + "y " * 400}]
    msgs.append({"role": "user", "content": "last question"})
    policy = CompactionPolicy(output_reserve_tokens=0, summary_min_tokens=200,
                              protect_first_n=0, tail_min_messages=1, tail_floor_messages=1)
    result = compact(msgs, context_length=2_000, policy=policy, counter=COUNTER)
    assert result.report.changed
    for provider in ("openai", "anthropic", "strict"):
        assert provider_problems(result.messages, provider) == [], provider
    assert result.messages[-1] == msgs[-1]


def test_acknowledgement_when_the_cut_cannot_move() -> None:
    from refold.compaction import compact, provider_problems
    from refold.compaction.policy import CompactionPolicy

    msgs = [{"role": "system", "content": "s"},
            {"role": "user", "content": "an old request " + "x " * 3000},
            {"role": "user", "content": "the latest request"},
            {"role": "assistant", "content": "the latest answer"}]
    policy = CompactionPolicy(output_reserve_tokens=0, summary_min_tokens=200,
                              protect_first_n=0, min_messages_to_compact=3,
                              tail_min_messages=1, tail_floor_messages=1)
    result = compact(msgs, context_length=2_000, policy=policy, counter=COUNTER)
    report = result.report
    assert report.changed and report.summary_acknowledged
    assert [m["role"] for m in result.messages] == ["system", "user", "assistant", "user",
                                                    "assistant"]
    for provider in ("openai", "anthropic", "strict"):
        assert provider_problems(result.messages, provider) == [], provider
    assert result.messages[-2:] == msgs[-2:]


def test_newest_tool_output_stays_verbatim_when_the_head_reaches_it() -> None:
    """A tiny window where the protected head covers everything (found by hypothesis)."""
    from refold.compaction import compact
    from refold.compaction.policy import CompactionPolicy

    body = "\n".join(["fix " * 14] * 20) + "\nexit code 0"
    msgs = [{"role": "system", "content": "You are an agent."},
            {"role": "user", "content": "fix"},
            call("c1", "terminal", command="fix"), result("c1", body)]
    out = compact(msgs, context_length=300, policy=CompactionPolicy(output_reserve_tokens=0),
                  counter=COUNTER)
    assert out.messages[-1]["content"] == body


def test_the_anchor_index_is_packed_and_reads_back_in_order() -> None:
    from refold.compaction.summary import render_anchor_block

    anchors = ["ls -F", "python reproduce.py", "a `quoted` error", *[f"src/m{i}.py" for i in
                                                                     range(30)]]
    block = render_anchor_block(anchors, "en")
    assert "- `ls -F`, `python reproduce.py`" in block and "\n- a `quoted` error\n" in block
    assert max(len(line) for line in block.splitlines()) <= 170
    assert unwrap_summary(wrap_summary("## Goal\n- x", anchors, "en"))[1] == anchors


def test_a_text_action_agents_observations_are_no_requests() -> None:
    """SWE-agent's observations come back as user messages: the goal stays the person's ask,
    no "Current request" quotes a curl progress meter, and the commands are the outcomes of
    the span (a fenced command and its observation read as a shell call and its result)."""
    ask = {"role": "user", "content": "Solve the I Got Id web challenge; the flag is flag{...}."}
    turns: list[dict[str, Any]] = []
    for i, page in enumerate(("hello.pl", "forms.pl", "file.pl")):
        turns += [{"role": "assistant", "content": f"Look at {page}.\n```\ncurl "
                                                   f"http://web:8000/cgi-bin/{page}\n```"},
                  {"role": "user", "content": f"% Total % Received % Xferd {i} <html>{page}"}]
    body = BuiltinSummarizer().summarize(_request(turns, prefix=[ask, *turns])).body
    goal = parse_body(body).get("goal")
    assert goal == ("Solve the I Got Id web challenge; the flag is flag{...}.",), goal
    sections = parse_body(body)
    assert not any("% Total" in item for name in ("goal", "in_progress", "next_steps",
                                                  "critical") for item in sections.get(name))
    assert [item.split(" → ")[0] for item in sections.get("done")] == [
        f"`curl http://web:8000/cgi-bin/{page}`" for page in ("hello.pl", "forms.pl", "file.pl")]
    # a chat whose assistant once shows a code block keeps the person's next ask as theirs
    chat = [ask, turns[0], {"role": "user", "content": "Thanks. Now write the exploit in "
                                                       "exploit.py and run it against port 8000."}]
    goal = parse_body(BuiltinSummarizer().summarize(_request(chat[1:], prefix=chat)).body
                      ).get("goal")
    assert any("write the exploit" in g for g in goal), goal


def test_a_mini_swe_agent_run_is_summarized_by_what_its_commands_did() -> None:
    """mini-swe-agent: each command in a fenced block, its output the next user message
    (``<returncode>``, ``<output>``). The file it fixed with ``sed -i`` was only "mentioned",
    Done held its intentions ("Let's test if our fix resolved…"), Next Steps the steps it had
    carried out, and the prompt's template gave a heading and a code comment as notes."""
    ask = {"role": "user", "content": (
        "Please solve this issue: running tests/calc.py fails with a SyntaxError.\n\n"
        "## Important Rules\n\n1. Every response must contain exactly one action\n"
        "```bash\nsed -i 's/old/new/' filename.py  # Replace only first occurrence\n```")}
    steps = [("Let me examine its content:", "cat tests/calc.py", 0, "def add(a, b)\n"),
             ("Let me fix the file:", "sed -i 's/def add(a, b)/def add(a, b):/' tests/calc.py",
              0, ""),
             ("Let's test if our fix resolved the syntax error:", "python3 tests/calc.py", 1,
              "Traceback (most recent call last):\nNameError: name 'b' is not defined"),
             ("The fix left a typo; I'll correct it:", "sed -i 's/a + c/a + b/' tests/calc.py",
              0, ""),
             ("Now let's run it again:", "python3 tests/calc.py", 0, "5")]
    turns: list[dict[str, Any]] = []
    for say, command, code, output in steps:
        turns += [{"role": "assistant",
                   "content": f"THOUGHT: {say}\n\n```mswea_bash_command\n{command}\n```"},
                  {"role": "user", "content": f"<returncode>{code}</returncode>\n<output>\n"
                                              f"{output}</output>"}]
    sections = parse_body(BuiltinSummarizer().summarize(
        _request(turns, prefix=[ask, *turns])).body)
    assert any(f.startswith("`tests/calc.py` — modified") for f in sections.get("files"))
    done = sections.get("done")
    assert any(d.startswith("`python3 tests/calc.py` → 5") for d in done), done
    assert any(d.startswith("`sed -i 's/a + c/a + b/' tests/calc.py`") for d in done)
    assert not any("Let's test" in d or "let's run" in d for d in done), done
    assert not sections.get("blocked")  # the failed run passed later
    assert not any("Let me" in n for n in sections.get("next_steps"))
    assert not any("Important Rules" in c for c in sections.get("critical"))
    assert not any("Replace only" in c for c in sections.get("constraints"))
    assert "Tools used: bash ×5" in sections.get("critical")


def test_a_tight_budget_spends_nothing_on_empty_sections() -> None:
    turns: list[dict[str, Any]] = [
        {"role": "user", "content": "Fix the rounding bug in src/marshmallow/fields.py " * 3},
        call("a", "execute_bash", command="python reproduce.py"),
        result("a", "344\n[The command completed with exit code 0.]"),
        {"role": "assistant", "content": "I decided to use round() because int() truncates."}]
    roomy = BuiltinSummarizer().summarize(_request(turns, budget=2000)).body
    tight = BuiltinSummarizer().summarize(_request(turns, budget=90)).body
    assert "None." in roomy and "None." not in tight, tight
    assert tight.startswith("## Goal\n- Fix the rounding bug")
    assert COUNTER.count_text(tight) <= 90
