"""The guard after compactions that stored nothing, and near the window while blocked.

Through ``refold serve`` with Claude Code on a 30k window (its tools and system prompt ~19.5k
of the 22.5k threshold), two plans that only pruned (nothing between the protected head and
tail to summarize, so nothing stored) each counted as an ineffective compaction: auto-compaction
was blocked for 5 minutes and the context grew past the window until the provider refused it."""

from __future__ import annotations

from refold.compaction import CompactionGuard, CompactionPolicy
from refold.compaction.core import CompactionReport


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _guard(clock: Clock) -> CompactionGuard:  # threshold 750, window 1000, tail budget 150
    return CompactionGuard(CompactionPolicy(output_reserve_tokens=0), context_length=1000,
                           clock=clock)


def _report(status: str = "ok", *, summary: str | None = "the summary", before: int = 800,
            after: int = 700, fits: bool = True) -> CompactionReport:
    return CompactionReport(status=status, reason="r", summarizer="builtin",
                            tokens_before=before, tokens_after=after, target_tokens=750,
                            threshold_tokens=750, fits=fits, messages_before=10,
                            messages_after=5, summary=summary)


def test_a_plan_that_summarized_nothing_is_no_strike_and_backs_off_as_a_noop() -> None:
    clock = Clock()
    guard = _guard(clock)
    for reading in (800, 820):
        assert guard.post_response(reading).compact or reading == 820
        guard.record(_report("pruned", summary=None, after=780), stored=False)
    status = guard.status()
    assert not status.blocked and status.strikes == 0
    assert not guard.post_response(840).compact  # backing off: nothing new to summarize yet
    assert guard.post_response(950).compact  # grown by the tail budget (150) past 800


def test_a_plan_whose_cut_did_not_line_up_is_planned_again_next_turn() -> None:
    guard = _guard(Clock())
    for _ in range(3):
        assert guard.post_response(800).compact
        guard.record(_report("ok"), stored=False)
    assert guard.status().strikes == 0 and not guard.status().blocked


def test_blocked_by_strikes_still_compacts_near_the_window() -> None:
    clock = Clock()
    guard = _guard(clock)
    for _ in range(2):  # two compactions whose next reading stayed over the threshold
        assert guard.post_response(800).compact
        guard.record(_report(after=760))
    guard.post_response(800)
    assert guard.status().blocked
    assert not guard.post_response(840).compact  # under 85% of the window: the block holds
    decision = guard.post_response(860)  # past it: sent as it is, the provider would refuse
    assert decision.compact, decision.reason
    guard.record(_report(before=860, after=790))
    assert not guard.post_response(900).compact  # not grown by the tail budget (150) past 790
    assert guard.post_response(940).compact
    guard.record(_report("refused", before=940, after=940))  # could not shrink it
    assert not guard.post_response(1000).compact  # no loop of refused compactions
    assert guard.post_response(1090).compact


def test_auto_compact_off_is_never_overridden_near_the_window() -> None:
    guard = CompactionGuard(CompactionPolicy(output_reserve_tokens=0, auto_compact=False),
                            context_length=1000)
    assert not guard.post_response(990).compact


def test_a_noop_back_off_gives_way_near_the_window() -> None:
    """OpenCode through ``refold serve`` on a 30k window: a compaction that found nothing to
    summarize at ~28k started a back-off lifting at 33,390 tokens (the no-op's size plus the
    tail budget), past the window: for a minute requests of 26-27k prompt tokens plus the
    client's 4,000 output tokens went to an upstream that refused each one."""
    clock = Clock()
    guard = _guard(clock)  # window 1000: the back-off after a no-op at 800 lifts at 950
    assert guard.post_response(800).compact
    guard.record(_report("noop", summary=None))
    assert guard.noop_lifts_at() == 950 and guard.pause_ends_at() == 850  # what a notice says
    assert not guard.post_response(840).compact  # under 85%: backing off
    assert guard.post_response(860).compact  # near the window: compacted even so
    guard.record(_report("noop", summary=None))  # ... and nothing was found again
    assert not guard.post_response(900).compact  # not grown by the tail budget since: no loop
    assert guard.post_response(1010).compact
