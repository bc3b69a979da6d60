"""Cost (issue 14 item 7): the summary and review models' usage is charged to the session that
caused it and priced with the user's overrides (refold.toml ``[pricing]``), and the optional
per-session budget warns or refuses — on both backends, the LLM calls against the scripted
server over a real socket."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from refold.assembly import build_engine, summarizer_setup
from refold.compaction.llm_summarizer import SYSTEM_INSTRUCTION
from refold.config import load_settings
from refold.errors import BudgetExceeded
from refold.memory.review import REVIEW_PROMPT
from refold.runtime.cost import CostBook, summarizer_model
from refold.store import Store
from refold.testing import ScriptedReply, serve

SUMMARY_USAGE = {"prompt_tokens": 40_000, "completion_tokens": 2_000, "total_tokens": 42_000}
REVIEW_USAGE = {"prompt_tokens": 10_000, "completion_tokens": 500, "total_tokens": 10_500}
# USD per million tokens, from refold.toml: the runtime must use these, not the shipped table
TOML = """
[pricing."gpt-4o"]
input = 10.0
output = 20.0
[pricing."summary-model"]
input = 1.0
output = 2.0
"""


def _kind(body: dict[str, Any]) -> str:
    first = body["messages"][0]
    text = first.get("content") if first.get("role") == "system" else ""
    if text == SYSTEM_INSTRUCTION:
        return "summary"
    if isinstance(text, str) and text.startswith(REVIEW_PROMPT[:40]):
        return "review"
    return "main"


def _upstream(body: dict[str, Any]) -> ScriptedReply:
    kind = _kind(body)
    if kind == "summary":
        return ScriptedReply(content="## Goal\nShip the build.\n## Progress\n### Done\n"
                                     "- the build scripts were checked", usage=SUMMARY_USAGE)
    if kind == "review":
        return ScriptedReply(content="nothing to save", usage=REVIEW_USAGE)
    return ScriptedReply(content="ok")


def _history(turns: int = 30) -> list[dict[str, Any]]:
    filler = "The build log said: step N compiled module alpha beta gamma delta. " * 12
    out: list[dict[str, Any]] = []
    for i in range(turns):
        out += [{"role": "user", "content": f"turn {i}: " + filler.replace("N", str(i))},
                {"role": "assistant", "content": f"noted {i}"}]
    return [*out, {"role": "user", "content": "And now?"}]


def _engine(store: Store, tmp_path: Path, url: str, **env: str) -> Any:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / "refold.toml").write_text(TOML, encoding="utf-8")
    environ = {"REFOLD_UPSTREAM": url, "REFOLD_SUMMARIZER": "llm",
               "REFOLD_SUMMARIZER_MODEL": "summary-model", "REFOLD_MODEL": "gpt-4o",
               "REFOLD_CONTEXT_LENGTH": "8000", **env}
    settings = load_settings({"home": str(home)}, environ)
    setup = summarizer_setup(settings)
    return build_engine(settings, store, setup), setup


def test_summary_usage_is_charged_to_the_session_at_the_overridden_price(
        store: Store, tmp_path: Path) -> None:
    with serve(default=_upstream) as up:
        engine, setup = _engine(store, tmp_path, up.base_url)
        try:
            rt = engine.open_session(new=True)
            prepared = rt.prepare(_history())
            assert prepared.compaction is not None and prepared.compaction.usage == SUMMARY_USAGE
            rt.record({"role": "assistant", "content": "ok"}, model="gpt-4o",
                      usage={"prompt_tokens": 3_000, "completion_tokens": 100})
        finally:
            engine.close()
            setup.close()
        # the memory flushes (after the checkpoint, at session end) review with the LLM too
        reviews = [_kind(b) for b in up.llm.requests].count("review")
    assert reviews >= 1
    session = store.get_session(rt.session_id)
    summary = (40_000 * 1.0 + 2_000 * 2.0) / 1e6
    reply = (3_000 * 10.0 + 100 * 20.0) / 1e6  # the override, not the shipped 2.50 / 10.00
    review = (10_000 * 1.0 + 500 * 2.0) / 1e6
    assert session.cost_usd == pytest.approx(summary + reply + reviews * review)
    assert (session.input_tokens, session.output_tokens) == (
        43_000 + reviews * 10_000, 2_100 + reviews * 500)
    assert session.model == "gpt-4o"  # the summary's usage does not rename the session's model


REVIEW_COST = (10_000 * 1.0 + 500 * 2.0) / 1e6  # priced as the review's model (summary-model)
TURN_COST = (1_000 * 10.0 + 10 * 20.0) / 1e6


def _one_turn(store: Store, tmp_path: Path, text: str, *,
              review_every: str) -> tuple[list[str], str, str]:
    """One user turn in a new session beside an idle one, then the engine closes (a session
    end). (kinds of the LLM calls made, the session's id, the idle session's id)"""
    with serve(default=_upstream) as up:
        engine, setup = _engine(store, tmp_path, up.base_url,
                                REFOLD_MEMORY_REVIEW_EVERY_TURNS=review_every,
                                REFOLD_CONTEXT_LENGTH="128000")
        try:
            other = engine.open_session(new=True)
            rt = engine.open_session(new=True)
            rt.prepare([{"role": "user", "content": text}])
            rt.record({"role": "assistant", "content": "Noted."}, model="gpt-4o",
                      usage={"prompt_tokens": 1_000, "completion_tokens": 10})
            rt.finish_turn(wait=True)
            engine.memory.manager.reviewer.join()
            rt.close()
        finally:
            engine.close()
            setup.close()
        return [_kind(b) for b in up.llm.requests], rt.session_id, other.session_id


def test_review_usage_is_charged_to_the_session_whose_turn_started_it(
        store: Store, tmp_path: Path) -> None:
    kinds, session_id, other_id = _one_turn(store, tmp_path, "I prefer tabs over spaces.",
                                            review_every="1")
    # the turn's review only: the session-end flush finds nothing that review did not read,
    # so it pays the review model nothing again
    assert kinds.count("review") == 1
    assert store.get_session(session_id).cost_usd == pytest.approx(REVIEW_COST + TURN_COST)
    assert store.get_session(other_id).cost_usd == 0.0


@pytest.mark.parametrize("action", ["warn", "refuse"])
def test_a_session_budget_warns_or_refuses_the_next_turn(
        store: Store, tmp_path: Path, action: str) -> None:
    with serve(default=_upstream) as up:
        engine, setup = _engine(store, tmp_path, up.base_url, REFOLD_CONTEXT_LENGTH="128000",
                                REFOLD_SESSION_BUDGET_USD="0.03",
                                REFOLD_BUDGET_ACTION=action)
        try:
            rt = engine.open_session(new=True)
            first = rt.prepare([{"role": "user", "content": "hi"}])
            assert first.warnings == []
            rt.record({"role": "assistant", "content": "hello"}, model="gpt-4o",
                      usage={"prompt_tokens": 3_000, "completion_tokens": 100})  # $0.032
            turn = [{"role": "user", "content": "again"}]
            if action == "warn":
                warned = rt.prepare(turn)
                assert any("budget of $0.0300" in w for w in warned.warnings), warned.warnings
            else:
                with pytest.raises(BudgetExceeded, match=r"\$0\.0320.*budget of \$0\.0300"):
                    rt.prepare(turn)
                # refused before storing: the library's prepare stores and returns, or raises
                texts = [r.message.get("content") for r in store.get_messages(rt.session_id)]
                assert texts == ["hi", "hello"]
        finally:
            engine.close()
            setup.close()


def test_usage_shapes_and_summarizer_names() -> None:
    book = CostBook(overrides={})
    anthropic = book.usage_of({"input_tokens": 100, "output_tokens": 10,
                               "cache_read_input_tokens": 1_000}, "claude-sonnet-4")
    assert anthropic is not None and anthropic.input_tokens == 1_100
    assert anthropic.cost_usd == pytest.approx((100 * 3.0 + 10 * 15.0 + 1_000 * 0.30) / 1e6)
    assert book.usage_of({}, "gpt-4o") is None
    unknown = book.usage_of({"prompt_tokens": 5, "completion_tokens": 1}, "local-model")
    assert unknown is not None and unknown.cost_usd == 0.0 and unknown.input_tokens == 5
    assert summarizer_model("llm:summary-model") == "summary-model"
    assert summarizer_model("builtin") is None


def test_a_session_end_memory_flush_is_charged_to_the_session_it_reviewed(
        store: Store, tmp_path: Path) -> None:
    # no periodic review: the only review call is the flush when the runtime closes
    kinds, session_id, other_id = _one_turn(
        store, tmp_path, "Remember that the staging DB is on 5433.", review_every="1000")
    assert kinds.count("review") == 1
    assert store.get_session(session_id).cost_usd == pytest.approx(REVIEW_COST + TURN_COST)
    assert store.get_session(other_id).cost_usd == 0.0
