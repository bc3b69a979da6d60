"""Compaction configuration and the trigger threshold.

Every default of the seeds lives in the frozen ``CompactionPolicy``; nothing here is a constant a
caller cannot change. ``threshold_for`` turns a policy, a window and a model name into the token
count at which auto-compaction triggers:

1. the ratio is the model override's (longest matching name substring) or the policy's (0.50);
2. for windows under 512K a raise-only floor applies (0.75) — unless the ratio was set
   explicitly for this model, which is never silently changed; a larger window never triggers
   below what the floor gave just under 512K (384K tokens: windows of 512K–768K trigger there,
   from 768K the ratio alone sets it);
3. output tokens are reserved (``window - output_reserve``), as long as the reserve leaves a
   usable window (25% of it; a request's own ``max_tokens`` raises the reserve for that turn:
   see ``SessionRuntime.output_reserve``); the trigger is monotonic in the window: from the
   smallest window the reserve applies to, it never drops below what the ratio gives there
   (4,096 tokens with the defaults: windows of 5,461–8,192 tokens trigger at 4,096);
4. the trigger never exceeds 85% of the window (and if the floor reached the window, 85% is
   where it triggers);
5. an absolute cap applies last, except over an explicit per-model ratio (reported instead).
"""

from __future__ import annotations

from refold._records import dataclass, field, replace


@dataclass(frozen=True)
class ModelOverride:
    """Settings for models whose name contains ``match`` (case-insensitive)."""

    match: str
    threshold_percent: float | None = None
    context_length: int | None = None
    threshold_tokens_cap: int | None = None


@dataclass(frozen=True)
class CompactionPolicy:
    # trigger
    # False: nothing compacts on its own (no preflight, post-response, background or overflow
    # compaction); an explicit compact (``rt.compact()``, ``refold sessions compact``) still does
    auto_compact: bool = True
    threshold_percent: float = 0.50
    small_window_floor_percent: float = 0.75
    small_window_limit: int = 512_000
    max_trigger_percent: float = 0.85
    output_reserve_tokens: int = 4_096
    threshold_tokens_cap: int | None = None
    overrides: tuple[ModelOverride, ...] = ()
    # pipeline
    protect_first_n: int = 3
    protect_first_share: float = 0.25  # ...and at most this share of the target, in tokens
    tail_ratio: float = 0.20  # tail budget as a share of the threshold
    tail_soft_ceiling: float = 1.5
    tail_min_messages: int = 3
    tail_floor_messages: int = 8
    prune_min_chars: int = 200
    tool_args_max_chars: int = 500
    summary_ratio: float = 0.20
    summary_min_tokens: int = 2_000
    summary_max_tokens: int = 10_000
    anchor_share: float = 0.35  # of the summary budget, at most anchor_max_tokens
    anchor_max_tokens: int = 2_500
    # a summary budget under this many tokens is tight: paraphrase costs more than it carries
    # there, so the exact identifiers get a larger (still bounded) share
    tight_summary_tokens: int = 1_024
    anchor_share_tight: float = 0.5
    summarizer_input_max_chars: int = 160_000
    min_messages_to_compact: int = 4
    # anti-thrash
    max_strikes: int = 2
    probe_after_seconds: float = 300.0
    timeout_cooldowns: tuple[float, ...] = (60.0, 300.0, 900.0)
    error_cooldown_seconds: float = 60.0
    no_provider_cooldown_seconds: float = 600.0
    # overflow recovery
    overflow_targets: tuple[float, ...] = (0.85, 0.70, 0.50, 0.35)
    # store
    rotate_on_compaction: bool = False
    lease_seconds: float = 300.0

    def with_overrides(self, **changes: object) -> CompactionPolicy:
        return replace(self, **changes)

    def override_for(self, model: str | None) -> ModelOverride | None:
        if not model:
            return None
        name = model.lower()
        matches = [o for o in self.overrides if o.match and o.match.lower() in name]
        return max(matches, key=lambda o: len(o.match)) if matches else None


_USABLE_SHARE = 0.25  # what the output reserve must leave of a window to apply


@dataclass(frozen=True)
class Threshold:
    tokens: int
    context_length: int
    percent: float  # effective share of the window
    notes: tuple[str, ...] = field(default_factory=tuple)


def threshold_for(policy: CompactionPolicy, context_length: int, model: str | None = None
                  ) -> Threshold:
    """The trigger threshold (see the module docstring for the rules, in order)."""
    override = policy.override_for(model)
    window = (override.context_length if override and override.context_length
              else context_length)
    window = max(1, int(window))
    explicit = override is not None and override.threshold_percent is not None
    percent = override.threshold_percent if explicit and override else policy.threshold_percent
    assert percent is not None
    notes: list[str] = []
    floor = None if explicit else policy.small_window_floor_percent

    def by_ratio(size: float) -> float:
        """The ratio's trigger for a window of ``size``: the floor's under the limit, and from
        the limit never less than the floor gave just under it."""
        if floor is None or floor <= percent:
            return size * percent
        return max(size * percent, min(size, policy.small_window_limit) * floor)

    tokens = by_ratio(window)
    # the reserve applies from the window where it leaves a usable quarter (``reserve / 0.75``);
    # below that the ratio alone sets the trigger, and above it the trigger never drops under
    # the ratio's value at that window: a larger window never triggers earlier
    reserve = max(0, policy.output_reserve_tokens)
    smallest = reserve / (1 - _USABLE_SHARE)
    if window >= smallest:
        tokens = min(tokens, max(window - reserve, by_ratio(smallest)))
    tokens = min(tokens, window * policy.max_trigger_percent)
    cap = override.threshold_tokens_cap if override and override.threshold_tokens_cap \
        else policy.threshold_tokens_cap
    if cap is not None and cap < tokens:
        if explicit and not (override and override.threshold_tokens_cap):
            notes.append(f"absolute cap {cap} not applied: {model!r} has an explicit ratio "
                         f"{percent:.2f}")
        else:
            tokens = cap
    return Threshold(int(tokens), window, tokens / window, tuple(notes))


def tail_budget(policy: CompactionPolicy, threshold_tokens: int) -> int:
    return max(1, int(threshold_tokens * policy.tail_ratio))


def summary_budget(policy: CompactionPolicy, replaced_tokens: int) -> int:
    """20% of what is replaced, clamped to [summary_min_tokens, summary_max_tokens]."""
    wanted = int(replaced_tokens * policy.summary_ratio)
    return max(policy.summary_min_tokens, min(policy.summary_max_tokens, wanted))
