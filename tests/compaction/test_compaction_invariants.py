"""Property tests: every DESIGN.md invariant of ``compact`` over generated conversations."""

from __future__ import annotations

import copy
from typing import Any

from conversations import conversations
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refold.compaction.core import compact
from refold.compaction.policy import CompactionPolicy
from refold.compaction.structure import provider_problems
from refold.compaction.summary import END_MARKER, PREFIX
from refold.messages.model import canonical_json, content_text, wire_form
from refold.tokens import EstimateCounter

POLICY = CompactionPolicy(summary_min_tokens=200, output_reserve_tokens=0, protect_first_n=3)
COUNTER = EstimateCounter()
SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _run(msgs: list[dict[str, Any]], window: int) -> Any:
    return compact(msgs, context_length=window, policy=POLICY, counter=COUNTER)


def _last(msgs: list[dict[str, Any]], role: str) -> dict[str, Any] | None:
    return next((m for m in reversed(msgs) if m["role"] == role), None)


def _all_text(msgs: list[dict[str, Any]]) -> str:
    parts = []
    for m in msgs:
        parts.append(content_text(m))
        parts.extend(c["function"]["arguments"] for c in m.get("tool_calls") or [])
    return "\n".join(parts)


@SETTINGS
@given(conversations(), st.integers(300, 6000))
def test_invariants_hold(msgs: list[dict[str, Any]], window: int) -> None:
    original = copy.deepcopy(msgs)
    result = _run(msgs, window)
    out, report = result.messages, result.report
    assert msgs == original  # never mutates the caller's list
    # 1. tool pairs valid for OpenAI always
    assert provider_problems(out, "openai") == []
    # 2. system never summarized; last user / last assistant verbatim
    for m in original:
        if m["role"] == "system":
            assert m in out
    for role in ("user", "assistant"):
        last = _last(original, role)
        if last is not None:
            assert last in [wire_form(m) for m in out], role
    # the newest message always closes the view, verbatim — or, when it alone would not fit,
    # cut to its head and tail around a note pointing to the ledger (issue 13)
    newest = wire_form(out[-1])
    if newest != original[-1]:
        text, full = newest["content"], original[-1]["content"]
        head, _, tail = text.partition("\n[… ")
        assert "full message is in the session ledger" in text and full.startswith(head)
        assert full.endswith(tail.split("…]\n", 1)[1])
        assert report.prune["messages_cut"] >= 1
    # 3. smaller, and fits or says why
    if report.changed:
        assert report.tokens_after < report.tokens_before
        assert report.fits or report.reason.startswith("irreducible")
    else:
        assert out == original
    # 4. framed, 5. anchors verbatim from the replaced span
    if report.summary:
        assert report.summary.startswith(PREFIX) and report.summary.endswith(END_MARKER)
        assert any(report.summary in content_text(m) for m in out)
        source = _all_text(original)
        for anchor in report.anchors:
            assert anchor in source and anchor in report.summary


@SETTINGS
@given(conversations(strict=True), st.integers(300, 6000))
def test_valid_for_anthropic_and_strict_providers(msgs: list[dict[str, Any]], window: int
                                                  ) -> None:
    result = _run(msgs, window)
    for provider in ("anthropic", "strict"):
        if not provider_problems(msgs, provider):
            assert provider_problems(result.messages, provider) == [], provider


@SETTINGS
@given(conversations(), st.integers(300, 6000))
def test_anthropic_validity_is_kept_with_same_role_runs(msgs: list[dict[str, Any]],
                                                        window: int) -> None:
    result = _run(msgs, window)
    if not provider_problems(msgs, "anthropic"):
        assert provider_problems(result.messages, "anthropic") == []


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversations(), st.integers(300, 6000))
def test_deterministic_byte_identical(msgs: list[dict[str, Any]], window: int) -> None:
    first = _run(copy.deepcopy(msgs), window)
    second = _run(copy.deepcopy(msgs), window)
    assert canonical_json(first.messages) == canonical_json(second.messages)
    assert first.report == second.report


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversations(), st.integers(300, 3000))
def test_recompaction_updates_the_summary(msgs: list[dict[str, Any]], window: int) -> None:
    first = _run(msgs, window)
    if not first.report.changed or not first.report.summary:
        return
    grown = first.messages + [{"role": "user", "content": "next request " * 50},
                              {"role": "assistant", "content": "answer " * 300}] * 3
    second = _run(grown, window)
    assert provider_problems(second.messages, "openai") == []
    summaries = [m for m in second.messages if PREFIX in content_text(m)]
    assert len(summaries) <= 1  # updated, never stacked


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversations(), st.integers(300, 6000))
def test_anthropic_wire_form_is_well_formed(msgs: list[dict[str, Any]], window: int) -> None:
    """Through refold.messages.anthropic: user first, every tool_use answered next turn."""
    from refold.messages.anthropic import to_anthropic

    turns = to_anthropic(_run(msgs, window).messages)["messages"]
    if any(m["role"] != "system" for m in msgs) and msgs[0]["role"] in ("system", "user"):
        assert turns[0]["role"] == "user"
    for i, turn in enumerate(turns):
        if i:
            assert turn["role"] != turns[i - 1]["role"]
        uses = [b["id"] for b in turn["content"] if isinstance(b, dict)
                and b.get("type") == "tool_use"] if isinstance(turn["content"], list) else []
        if uses:
            nxt = turns[i + 1]["content"]
            results = [b["tool_use_id"] for b in nxt if b.get("type") == "tool_result"]
            assert results[:len(uses)] == uses
