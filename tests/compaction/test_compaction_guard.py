"""Trigger policy, anti-thrash state machine, overflow recovery (a fake clock, no sleeping)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from agent_transcript import agent_transcript

from refold.compaction.core import CompactionReport
from refold.compaction.engine import compact_for_overflow
from refold.compaction.guard import CompactionGuard
from refold.compaction.policy import CompactionPolicy, ModelOverride, threshold_for
from refold.compaction.structure import provider_problems
from refold.errors import CompactionError
from refold.tokens import get_counter


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _report(status: str = "ok", *, fits: bool = True, kind: str | None = None,
            summarizer: str = "builtin") -> CompactionReport:
    return CompactionReport(status=status, reason="r", summarizer=summarizer, tokens_before=100,
                            tokens_after=50, target_tokens=80, threshold_tokens=80, fits=fits,
                            messages_before=10, messages_after=5, error_kind=kind)


# -- threshold -----------------------------------------------------------------------------
@pytest.mark.parametrize(("window", "policy", "model", "expected"), [
    (1_000_000, CompactionPolicy(output_reserve_tokens=0), None, 500_000),
    (128_000, CompactionPolicy(output_reserve_tokens=0), None, 96_000),  # 0.75 floor < 512K
    (128_000, CompactionPolicy(output_reserve_tokens=40_000), None, 88_000),  # reserve
    (128_000, CompactionPolicy(threshold_percent=0.95, output_reserve_tokens=0), None,
     108_800),  # never above 85%
    (1_000_000, CompactionPolicy(threshold_tokens_cap=200_000), None, 200_000),
    (128_000, CompactionPolicy(output_reserve_tokens=0, overrides=(
        ModelOverride("qwen", threshold_percent=0.6),)), "Qwen3-32B", 76_800),  # explicit ratio
    (128_000, CompactionPolicy(output_reserve_tokens=0, overrides=(
        ModelOverride("qwen", context_length=32_000),)), "qwen3", 24_000),
])
def test_threshold_rules(window: int, policy: CompactionPolicy, model: str | None,
                         expected: int) -> None:
    assert threshold_for(policy, window, model).tokens == expected


def test_absolute_cap_never_silently_overrides_explicit_ratio() -> None:
    policy = CompactionPolicy(output_reserve_tokens=0, threshold_tokens_cap=50_000,
                              overrides=(ModelOverride("gpt-4o", threshold_percent=0.6),))
    info = threshold_for(policy, 128_000, "gpt-4o-mini")
    assert info.tokens == 76_800 and info.notes and "cap" in info.notes[0]
    assert threshold_for(policy, 128_000, "other").tokens == 50_000


def test_longest_override_match_wins() -> None:
    policy = CompactionPolicy(overrides=(ModelOverride("gpt", threshold_percent=0.6),
                                         ModelOverride("gpt-4o", threshold_percent=0.7)))
    override = policy.override_for("openai/GPT-4o-mini")
    assert override is not None and override.threshold_percent == 0.7


# -- entry points and anti-thrash ------------------------------------------------------------
def _guard(clock: Clock) -> CompactionGuard:
    return CompactionGuard(CompactionPolicy(output_reserve_tokens=0), context_length=1000,
                           clock=clock)  # threshold 750


def test_entry_points() -> None:
    guard = _guard(Clock())
    assert not guard.preflight(100).compact
    assert guard.preflight(800).compact
    assert guard.post_response(800).compact
    overflow = guard.on_overflow(0)
    assert overflow.compact and overflow.target_tokens == 850
    assert guard.on_overflow(3).target_tokens == 350
    assert not guard.on_overflow(4).compact


def test_no_compaction_on_an_estimate_while_a_real_reading_is_pending() -> None:
    guard = _guard(Clock())
    guard.note_request_sent()
    decision = guard.preflight(800)
    assert not decision.compact and "pending" in decision.reason
    assert guard.preflight(900, exact=True).compact
    guard.post_response(100)
    assert guard.preflight(800).compact


def test_two_ineffective_compactions_block_then_probe_after_300s() -> None:
    clock = Clock()
    guard = _guard(clock)
    for _ in range(2):
        assert guard.post_response(800).compact
        guard.record(_report())
    guard.post_response(800)  # second strike lands here
    status = guard.status()
    assert status.blocked and status.strikes == 2 and "blocked" in (status.reason or "")
    decision = guard.post_response(800)
    assert not decision.compact and decision.notice
    clock.now += 301
    probe = guard.preflight(800)
    assert probe.compact and probe.probe
    guard.record(_report())
    assert not guard.preflight(800).compact  # only one probe
    guard.post_response(100)  # the probe worked
    assert not guard.status().blocked and guard.status().strikes == 0


def test_failed_probe_blocks_again() -> None:
    clock = Clock()
    guard = _guard(clock)
    guard.record(_report(status="refused"))
    guard.record(_report(status="refused"))  # growth refused twice
    assert guard.status().blocked
    clock.now += 301
    assert guard.preflight(800).probe
    guard.record(_report())
    guard.post_response(800)
    assert guard.status().blocked
    clock.now += 100
    assert not guard.preflight(800).compact


def test_irreducible_result_stops_auto_compaction_at_once() -> None:
    guard = _guard(Clock())
    guard.record(_report(fits=False))
    assert guard.status().blocked


def test_structural_noop_backs_off_without_a_strike() -> None:
    clock = Clock()
    guard = _guard(clock)
    guard.record(_report(status="noop"))
    assert guard.strikes == 0 and not guard.preflight(800).compact
    clock.now += 61
    assert guard.preflight(800).compact


def test_timeout_cooldown_ladder_uses_builtin_meanwhile() -> None:
    clock = Clock()
    guard = _guard(clock)
    for expected in (60, 300, 900, 900):
        guard.record(_report(status="fallback", kind="timeout"))
        assert guard.status().cooldown_remaining == expected
        decision = guard.preflight(800)
        assert decision.compact and decision.use_builtin
        clock.now += expected + 1
        assert not guard.preflight(800).use_builtin
    guard.record(_report(status="fallback", kind="server"))
    assert guard.status().cooldown_remaining == 60


def test_hard_summarizer_failure_pauses_auto_compaction_with_a_reason() -> None:
    clock = Clock()
    guard = _guard(clock)
    guard.record(_report(status="aborted", kind="auth"))
    status = guard.status()
    assert status.blocked and status.cooldown_remaining == 600 and "auth" in (status.reason or "")
    assert not guard.preflight(800).compact
    assert guard.on_overflow(0).use_builtin  # overflow recovery still works, with builtin
    clock.now += 601
    assert guard.preflight(800).compact


# -- overflow ------------------------------------------------------------------------------
def test_compact_for_overflow_shrinks_then_errors() -> None:
    counter = get_counter("gpt-4o")
    msgs = agent_transcript(40)
    policy = CompactionPolicy(summary_min_tokens=500, output_reserve_tokens=0)
    sizes = []
    for attempt in range(4):
        result = compact_for_overflow(msgs, attempt, context_length=12_000, policy=policy,
                                      counter=counter)
        assert provider_problems(result.messages, "openai") == []
        sizes.append(result.report.target_tokens)
    assert sizes == [10_200, 8_400, 6_000, 4_200]
    with pytest.raises(CompactionError, match="still too long"):
        compact_for_overflow(msgs, 4, context_length=12_000, policy=policy, counter=counter)


def test_policy_is_configuration() -> None:
    policy = CompactionPolicy()
    changed = policy.with_overrides(threshold_percent=0.6)
    assert changed.threshold_percent == 0.6 and policy.threshold_percent == 0.5
    with pytest.raises(AttributeError):
        policy.threshold_percent = 0.1  # type: ignore[misc]
    assert replace(policy, max_strikes=3).max_strikes == 3


def test_a_noop_back_off_lifts_once_the_context_grew_by_the_tail_budget() -> None:
    """A no-op (nothing between the protected head and tail) at 600k tokens of a 1M window
    (threshold 500k): the next turns hold off only while the context has not grown by the
    tail budget (20% of the threshold, here 100k): an agent's quick tool turns would otherwise
    outgrow the window inside the 60 s back-off, as OpenCode's did through refold serve.
    (Past 85% of the window it gives way: ``test_guard_unstored``.)"""
    clock = Clock()
    guard = CompactionGuard(CompactionPolicy(output_reserve_tokens=0),
                            context_length=1_000_000, clock=clock)
    assert guard.preflight(600_000).compact
    guard.record(_report(status="noop"))
    assert not guard.preflight(650_000).compact  # grown by less than the tail: nothing new
    assert not guard.post_response(699_999).compact
    decision = guard.post_response(700_000)  # grown by the tail budget: the middle has turns
    assert decision.compact, decision.reason
