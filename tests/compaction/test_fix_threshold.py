"""The trigger threshold grows with the window: a larger window never triggers earlier, and
the documented defaults (50%, 75% under 512K, at most 85%, the output reserve) are unchanged
for ordinary windows."""

from __future__ import annotations

import pytest

from refold.compaction.policy import CompactionPolicy, ModelOverride, threshold_for


@pytest.mark.parametrize("policy", [
    CompactionPolicy(),
    CompactionPolicy(output_reserve_tokens=0),
    CompactionPolicy(output_reserve_tokens=40_000),
    CompactionPolicy(output_reserve_tokens=16_384, threshold_percent=0.95),
    CompactionPolicy(small_window_limit=0, threshold_percent=0.2),
])
def test_the_threshold_is_monotonic_in_the_window(policy: CompactionPolicy) -> None:
    windows = [*range(1_000, 40_000, 61), *range(40_000, 1_100_000, 997)]
    tokens = [threshold_for(policy, w).tokens for w in windows]
    drops = [(w, t) for w, t, before in zip(windows[1:], tokens[1:], tokens[:-1], strict=True)
             if t < before]
    assert drops == []


def test_the_reserve_no_longer_makes_a_larger_window_trigger_earlier() -> None:
    policy = CompactionPolicy()
    assert threshold_for(policy, 6_000).tokens >= threshold_for(policy, 5_461).tokens


@pytest.mark.parametrize(("window", "expected"), [
    (3_000, 2_250),  # under the reserve's reach: the 75% floor alone
    (5_000, 3_750),
    (16_000, 11_904),  # window - 4,096
    (32_000, 24_000),  # 75%
    (128_000, 96_000),
    (200_000, 150_000),
    (1_000_000, 500_000),  # 50% from 512K
])
def test_documented_defaults_are_unchanged(window: int, expected: int) -> None:
    assert threshold_for(CompactionPolicy(), window).tokens == expected


def test_an_explicit_ratio_stays_monotonic_and_exact() -> None:
    policy = CompactionPolicy(overrides=(ModelOverride("qwen", threshold_percent=0.6),))
    assert threshold_for(policy, 128_000, "qwen3").tokens == 76_800
    prev = 0
    for window in range(1_000, 30_000, 37):
        now = threshold_for(policy, window, "qwen3").tokens
        assert now >= prev
        prev = now


def test_crossing_the_small_window_limit_does_not_lower_the_trigger() -> None:
    policy = CompactionPolicy()
    under = threshold_for(policy, 511_999).tokens
    assert threshold_for(policy, 512_000).tokens >= under
    assert threshold_for(policy, 600_000).tokens >= under
