"""The per-session Trigger over CompactionGuard: decisions, overflow targets, notices."""

from __future__ import annotations

from refold.compaction import CompactionPolicy
from refold.runtime.trigger import Trigger


def _trigger() -> Trigger:
    return Trigger(CompactionPolicy(), context_length=16_000, model="gpt-4o-mini")


def test_preflight_waits_for_a_pending_reading_unless_over_the_window() -> None:
    t = _trigger()
    assert not t.preflight(t.threshold - 1)
    t.note_request_sent()
    assert not t.preflight(t.threshold + 10)  # a real reading is on its way
    assert t.preflight(16_000)  # over the whole window: act anyway
    t.note_no_reading()
    assert t.preflight(t.threshold + 10)


def test_post_response_uses_the_real_reading() -> None:
    t = _trigger()
    t.note_request_sent()
    assert t.post_response(t.threshold + 1)
    assert not t.post_response(t.threshold - 1)


def test_overflow_targets_shrink_and_end() -> None:
    t = _trigger()
    targets = [t.overflow_target(a, 20_000) for a in range(5)]
    assert targets[0] is not None and targets[3] is not None
    assert targets[0] > targets[1] > targets[2] > targets[3]
    assert targets[4] is None
    # a provider limit below the configured window: the share applies to what was rejected
    assert t.overflow_target(0, 8_000) == int(8_000 * 0.85)


def test_a_blocked_notice_is_shown_once() -> None:
    t = _trigger()
    t.guard._strike("ineffective")
    t.guard._strike("ineffective")
    for _ in range(5):
        assert not t.preflight(t.threshold + 100)
    warnings = t.take_warnings()
    assert len(warnings) == 1 and "blocked" in warnings[0]
    assert t.status()["blocked"] is True
