"""Fits, or says why; never stuck (issue 13 findings, each a test that failed before the fix).

- a quarter window: a 19K-token final tool result kept verbatim made the output exceed the
  window with no warning; now the oversized kept message is cut (head and tail kept, a note
  pointing to the ledger) and what still does not fit is said in plain words;
- a session whose first messages are large was stuck for good (the head was protected by
  count); the head is protected by tokens now and a large head is summarized;
- ``refold compact`` exited 0 when the result did not fit or the compaction aborted.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from refold.cli.main import main
from refold.compaction import compact, provider_problems
from refold.compaction.summarizer import SummaryDraft, SummaryRequest
from refold.errors import SummarizerError
from refold.tokens import get_counter

COUNTER = get_counter("gpt-4o")
LOG = "\n".join(f"src/pkg/module_{i}.py:{i}: DeprecationWarning: call {i} is old"
                for i in range(1500))


def call(cid: str, command: str) -> dict[str, Any]:
    return {"role": "assistant", "content": f"Running {command}.", "tool_calls": [
        {"id": cid, "type": "function", "function": {"name": "execute_bash",
                                                     "arguments": json.dumps({"command": command})}}]}


def result(cid: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": cid, "content": text}


def agent_session(rounds: int = 12) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."},
                                  {"role": "user", "content": "Fix the failing build."}]
    for i in range(rounds):
        msgs += [call(f"c{i}", f"make test PART={i}"),
                 result(f"c{i}", f"part {i}\n" + "ok line\n" * 300 + "exit code 0")]
    msgs += [call("last", "make all"), result("last", LOG + "\nexit code 2")]
    return msgs


def test_an_oversized_final_tool_result_is_cut_to_fit() -> None:
    msgs = agent_session()
    size = COUNTER.count_messages(msgs)
    final = COUNTER.count_message(msgs[-1])
    target = size // 4
    assert final > target  # the last output alone is over the window
    out = compact(msgs, context_length=size, target_tokens=target, model="gpt-4o")
    assert out.report.fits, out.report
    assert out.report.tokens_after <= target
    last = out.messages[-1]["content"]
    assert last.startswith(LOG[:200]) and last.endswith("exit code 2")  # head and tail kept
    assert "full message is in the session ledger" in last
    assert out.report.prune["messages_cut"] == 1
    assert msgs[-1]["content"] == LOG + "\nexit code 2"  # the input is never touched
    for provider in ("openai", "anthropic", "strict"):
        assert provider_problems(out.messages, provider) == []


def test_when_the_floor_cannot_fit_the_warning_says_why() -> None:
    big_user = "Please port this module. " + "It has a long spec line. " * 2500
    msgs = [{"role": "system", "content": "You are a coding agent. " * 400},
            {"role": "user", "content": "start"}, {"role": "assistant", "content": "ok"},
            {"role": "user", "content": big_user}, {"role": "assistant", "content": "Done."}]
    out = compact(msgs, context_length=8000, target_tokens=2000, model="gpt-4o")
    assert not out.report.fits
    warning = next(w for w in out.report.warnings if w.startswith("does not fit"))
    assert "system prompt" in warning and "target of 2000" in warning


def test_a_large_first_message_no_longer_sticks_the_session() -> None:
    """The first three messages alone overflow the target: they are summarized now."""
    head = [{"role": "user", "content": "Context dump:\n" + LOG[:40_000]},
            {"role": "assistant", "content": "Read it. " + LOG[40_000:60_000]},
            {"role": "user", "content": "Now fix src/pkg/module_3.py, please."}]
    msgs = [{"role": "system", "content": "You are a coding agent."}, *head]
    for i in range(6):
        msgs += [call(f"c{i}", f"pytest tests/test_{i}.py"),
                 result(f"c{i}", f"{i} passed\nexit code 0"),
                 {"role": "assistant", "content": f"Step {i} done."},
                 {"role": "user", "content": f"Next: step {i + 1}."}]
    size = COUNTER.count_messages(msgs)
    out = compact(msgs, context_length=size, target_tokens=size // 2, model="gpt-4o")
    assert out.report.status == "ok", out.report.reason
    assert out.report.head_end == 1  # only the system prompt is protected
    assert out.report.fits


def test_cli_compact_exits_1_when_it_does_not_fit(tmp_path: Path) -> None:
    msgs = [{"role": "system", "content": "You are a coding agent. " * 600},
            {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    path = tmp_path / "t.json"
    path.write_text(json.dumps(msgs))
    with pytest.raises(SystemExit) as exc:
        main(["--home", str(tmp_path / "h"), "compact", str(path), "--context-length", "1000",
              "--json"])
    assert exc.value.code == 1


class Aborting:
    name = "aborting"

    def summarize(self, request: SummaryRequest) -> SummaryDraft:
        raise SummarizerError("bad key", retryable=False, kind="auth")


def test_exit_code_is_1_when_the_compaction_aborted() -> None:
    from refold.cli.compact import exit_code

    msgs = agent_session(4)
    size = COUNTER.count_messages(msgs)
    out = compact(msgs, context_length=size, target_tokens=size // 2, summarizer=Aborting())
    assert out.report.status == "aborted"
    assert exit_code(out.report) == 1
    fine = compact(msgs, context_length=size, target_tokens=size // 2)
    assert fine.report.fits and exit_code(fine.report) == 0


def test_the_floor_names_the_tool_definitions_it_holds() -> None:
    """An agent's tool schemas go with every request (OpenCode's ten took ~5K tokens of a 12K
    window through refold serve): a floor that left them out did not add up to what it said
    could not be cut."""
    tools = [{"type": "function", "function": {
        "name": f"tool_{i}", "description": "Run a long described operation. " * 60,
        "parameters": {"type": "object", "properties": {"x": {"type": "string"}}}}}
        for i in range(6)]
    msgs = agent_session(rounds=6)
    schemas = COUNTER.count_tools(tools)
    size = COUNTER.count_messages(msgs) + schemas
    out = compact(msgs, context_length=size, target_tokens=schemas + 200, model="gpt-4o",
                  tools=tools)
    assert not out.report.fits
    assert f"tool definitions {schemas}" in out.report.reason, out.report.reason
    assert any(f"the tool definitions sent with every request {schemas}" in w
               for w in out.report.warnings), out.report.warnings


def test_a_window_shared_with_large_tool_definitions_is_planned_for_what_they_leave() -> None:
    """The tool definitions go with every request, so head, tail and summary share what they
    leave. Planned against the whole target, the tail alone filled it and the result (with
    the definitions) overflowed: ``refold demo --context-length 4000`` (1.3K tokens of
    definitions) stopped on the provider's 400 after every retry."""
    tools = [{"type": "function", "function": {
        "name": f"tool_{i}", "description": "Run a long described operation. " * 30,
        "parameters": {"type": "object", "properties": {"x": {"type": "string"}}}}}
        for i in range(4)]
    msgs = agent_session(rounds=12)
    schemas = COUNTER.count_tools(tools)
    target = schemas + 1800
    out = compact(msgs, context_length=4 * target, target_tokens=target, model="gpt-4o",
                  tools=tools)
    assert out.report.fits, out.report
    assert COUNTER.count_messages(out.messages) + schemas <= target
    assert provider_problems(out.messages) == []


def _write_rounds(first: int, last: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for k in range(first, last):
        body = "\n".join(f"def f{k}_{j}(x):\n    return x + {j}" for j in range(60))
        out += [{"role": "assistant", "content": f"Now I'll write module {k}.",
                 "tool_calls": [{"id": f"c{k}", "type": "function", "function": {
                     "name": "write_file",
                     "arguments": json.dumps({"path": f"src/mod{k}.py", "content": body})}}]},
                {"role": "tool", "tool_call_id": f"c{k}", "content": f"Wrote src/mod{k}.py"}]
    return out


def test_an_agent_working_alone_after_one_request_is_compacted_again_and_again() -> None:
    """One user request, then only tool rounds: after the first compaction the request (the
    last real user message, kept verbatim) sat before the summary, the tail reached back to it
    and took everything, and every later compaction found nothing to summarize — the context
    grew past the window. Now the request is kept as the head and the rounds after the
    summary are summarized."""
    view: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Write modules mod0..mod79 under src/."}]
    for step in range(4):
        view += _write_rounds(20 * step, 20 * step + 20)
        result = compact(view, context_length=16_000)
        assert result.report.status == "ok", (step, result.report.reason)
        assert result.report.tokens_after <= result.report.target_tokens, step
        view = result.messages
        assert view[1] == {"role": "user", "content": "Write modules mod0..mod79 under src/."}
        assert provider_problems(view) == []


def test_the_runtime_keeps_an_autonomous_run_in_its_window(tmp_path: Path) -> None:
    from refold.runtime import Engine
    from refold.store.sqlite import SQLiteStore

    store = SQLiteStore(str(tmp_path / "refold.db"))
    engine = Engine(store, model="gpt-4o", context_length=16_000, background_precompact=False)
    try:
        rt = engine.open_session(new=True)
        rt.prepare([{"role": "user", "content": "Write modules mod0..mod79 under src/."}],
                   system_prompt="You are a coding agent.")
        compactions = 0
        for k in range(60):
            call, result = _write_rounds(k, k + 1)
            rt.record(call)
            prepared = rt.prepare([result])
            compactions += prepared.compaction is not None and \
                prepared.compaction.status == "ok"
            assert prepared.tokens <= 16_000, (k, prepared.warnings)
        assert compactions >= 3
    finally:
        engine.close()
        store.close()
