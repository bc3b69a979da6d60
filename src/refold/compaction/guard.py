"""When to compact: the trigger entry points and the anti-thrash state machine.

Entry points: ``preflight`` (an estimate before a call), ``post_response`` (the provider's real
``prompt_tokens``), ``on_overflow`` (the provider rejected the prompt; bounded retries with
shrinking targets). A rough estimate never triggers while a real reading is pending.

Anti-thrash, per session:
- a compaction whose next real reading is still over the threshold is a *strike*; a compaction
  refused because it would grow the context is a strike; one that cannot fit at all
  (irreducible floor) blocks at once — auto-compaction stops instead of looping;
- ``max_strikes`` (2) strikes block auto-compaction; after ``probe_after_seconds`` (300) one
  probe is allowed: effective → unblocked, ineffective → blocked again. The block holds between
  the threshold and the window, not past it: a context at ``overflow_targets[0]`` (85%) of the
  window is still compacted (as small as it goes), then again only after a tail budget of
  growth past what that left — a context that cannot get under the threshold (tools and a
  system prompt taking most of a small window) was otherwise sent on growing until the
  provider rejected it;
- a structural no-op (too few messages, nothing between the protected head and tail; also a
  plan that only pruned, so stored nothing) backs off without a strike (but not past 85% of
  the window, as above), for ``error_cooldown_seconds`` or until the context has grown by the
  tail budget past the size that no-op saw, whichever comes first: by then the turns the tail
  protected have moved into the middle, so there is something to summarize (an agent's quick
  tool turns could otherwise outgrow the window inside the back-off);
- summarizer failures start cooldowns: timeouts 60 → 300 → 900 s, other retryable errors 60 s
  (the builtin summarizer is used meanwhile); auth/quota/lost network/truncation 600 s ("no
  provider": auto-compaction waits, since falling back would ignore the configured abort).
``status().reason`` is the sentence to show the user.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from refold._records import dataclass
from refold.compaction.core import CompactionReport
from refold.compaction.policy import CompactionPolicy, Threshold, tail_budget, threshold_for

Clock = Callable[[], float]
HARD_KINDS = frozenset({"auth", "quota", "network", "truncated"})
AUTO_OFF = "auto-compaction is off (compaction.auto_compact = false)"
NOOP_BACKOFF = "backing off after a no-op compaction"


@dataclass(frozen=True)
class Decision:
    compact: bool
    entry: str  # preflight | post_response | overflow
    reason: str
    tokens: int
    threshold: int
    probe: bool = False
    use_builtin: bool = False  # the llm summarizer is cooling down: use the builtin one
    target_tokens: int | None = None  # overflow: the shrinking target for this attempt
    notice: str | None = None  # a user-visible sentence when auto-compaction is held back


@dataclass(frozen=True)
class GuardStatus:
    blocked: bool
    reason: str | None
    strikes: int
    cooldown_remaining: float
    cooldown_kind: str | None
    threshold: int


class CompactionGuard:
    """Per-session trigger state. Not thread-safe: one guard per session, used by one caller."""

    def __init__(self, policy: CompactionPolicy, *, context_length: int,
                 model: str | None = None, clock: Clock = time.monotonic) -> None:
        self.policy = policy
        self.model = model
        self.clock = clock
        self.threshold_info: Threshold = threshold_for(policy, context_length, model)
        self.strikes = 0
        self.blocked_since: float | None = None
        self.block_reason: str | None = None
        self.cooldown_until = 0.0
        self.cooldown_kind: str | None = None
        self.timeout_streak = 0
        self.noop_until = 0.0
        self.noop_tokens = 0  # the context size the last no-op was decided at (0: not known)
        self.decided_tokens = 0  # the context size the last compaction was decided at
        # the context size the last compaction near the window left (or found, when it stored
        # nothing): the next one waits for a tail budget of growth past it
        self.near_result = 0
        self.near_pending = False
        self.pending_reading = False
        self.awaiting_effect = False
        self.probing = False
        self.last_reading: int | None = None

    @property
    def threshold(self) -> int:
        return self.threshold_info.tokens

    # -- entry points ------------------------------------------------------------------------
    def note_request_sent(self) -> None:
        """A request is in flight: its real reading is pending."""
        self.pending_reading = True

    def note_request_failed(self) -> None:
        self.pending_reading = False

    def preflight(self, estimated_tokens: int, *, exact: bool = False) -> Decision:
        if self.pending_reading and not exact:
            return self._no("preflight", estimated_tokens,
                            "a real reading is pending; not acting on an estimate")
        return self._decide("preflight", estimated_tokens)

    def post_response(self, prompt_tokens: int) -> Decision:
        """Fold in the provider's reading; judge the previous compaction; decide."""
        self.pending_reading = False
        self.last_reading = prompt_tokens
        if self.awaiting_effect:
            self.awaiting_effect = False
            if prompt_tokens >= self.threshold:
                self._strike(f"a compaction left the context at {prompt_tokens} tokens, still "
                             f"over the threshold {self.threshold}")
            else:
                self.strikes, self.blocked_since, self.block_reason = 0, None, None
            self.probing = False
        return self._decide("post_response", prompt_tokens)

    def on_overflow(self, attempt: int, tokens: int = 0) -> Decision:
        """The provider said the prompt is too long; ``attempt`` counts from 0."""
        targets = self.policy.overflow_targets
        if not self.policy.auto_compact:
            return self._no("overflow", tokens, AUTO_OFF)
        if attempt >= len(targets):
            return self._no("overflow", tokens, f"still too long after {len(targets)} "
                            "compaction attempts")
        target = int(self.threshold_info.context_length * targets[attempt])
        return Decision(True, "overflow", f"provider overflow, attempt {attempt + 1}", tokens,
                        self.threshold, use_builtin=self._cooling(), target_tokens=target)

    # -- outcomes ----------------------------------------------------------------------------
    def record(self, report: CompactionReport, *, stored: bool = True) -> None:
        """Update strikes and cooldowns from a compaction's report. ``stored=False``: its
        checkpoint was not kept (it summarized nothing, or its cut did not line up with the
        ledger), so the context did not change and the next reading says nothing about it: no
        strike. One that summarized nothing backs off as a no-op does (it found nothing between
        the head and the tail either); one whose cut did not line up is planned again next
        turn."""
        now = self.clock()
        if self.near_pending:
            self.near_pending = False
            self.near_result = (report.tokens_after if stored and report.status not in
                                ("refused", "aborted", "noop") else self.decided_tokens)
        if report.status == "noop" or (not stored and report.status in ("ok", "pruned")
                                        and report.summary is None):
            self._noop(now)
            return
        if report.status == "refused":
            self._strike(report.reason)
            return
        if report.status == "aborted":
            self._cooldown(report.error_kind or "error", now)
            return
        if report.status == "fallback":
            self._cooldown(report.error_kind or "error", now)
        elif report.summarizer.startswith("llm"):
            self.timeout_streak = 0
        if not stored:
            if report.summary is None:
                self._noop(now)
            return
        if not report.fits:
            self.strikes = max(self.strikes, self.policy.max_strikes - 1)
            self._strike(report.reason)
            return
        self.awaiting_effect = True

    def _noop(self, now: float) -> None:
        self.noop_until = now + self.policy.error_cooldown_seconds
        self.noop_tokens = self.decided_tokens

    def noop_lifts_at(self) -> int:
        """The context size at which a no-op's back-off lifts before its time is up."""
        return self.noop_tokens + tail_budget(self.policy, self.threshold)

    def status(self) -> GuardStatus:
        now = self.clock()
        blocked, reason, _ = self._blocked(now)
        remaining = max(0.0, self.cooldown_until - now)
        return GuardStatus(blocked, reason, self.strikes, remaining,
                           self.cooldown_kind if remaining else None, self.threshold)

    # -- internals ---------------------------------------------------------------------------
    def _no(self, entry: str, tokens: int, reason: str, notice: str | None = None) -> Decision:
        return Decision(False, entry, reason, tokens, self.threshold, notice=notice)

    def _decide(self, entry: str, tokens: int) -> Decision:
        if tokens < self.threshold:
            return self._no(entry, tokens, f"{tokens} tokens < threshold {self.threshold}")
        if not self.policy.auto_compact:
            return self._no(entry, tokens, AUTO_OFF)
        now = self.clock()
        backing_off = now < self.noop_until and (not self.noop_tokens
                                                 or tokens < self.noop_lifts_at())
        blocked, reason, probe = self._blocked(now)
        held = backing_off or (blocked and self.strikes >= self.policy.max_strikes)
        if held and self._near_window(tokens):
            self.decided_tokens, self.near_pending = tokens, True
            return Decision(True, entry, f"{tokens} tokens near the window "
                            f"({self.threshold_info.context_length}) while auto-compaction is "
                            "held back", tokens, self.threshold, use_builtin=self._cooling())
        if backing_off:
            return self._no(entry, tokens, NOOP_BACKOFF)
        if blocked:
            return self._no(entry, tokens, reason or "blocked", notice=reason)
        if probe:
            self.probing = True
        self.decided_tokens = tokens
        return Decision(True, entry, f"{tokens} tokens ≥ threshold {self.threshold}", tokens,
                        self.threshold, probe=probe, use_builtin=self._cooling())

    def _near_window(self, tokens: int) -> bool:
        """Too near the window to send as it is, while blocked by strikes or backing off after
        a no-op (see the module docstring)."""
        return tokens >= self._near_from()

    def _near_from(self) -> int:
        """The context size from which a held-back compaction runs anyway: 85% of the window
        (never under the threshold), and a tail budget past what the last such one left."""
        near = int(self.threshold_info.context_length * self.policy.overflow_targets[0])
        return max(self.threshold, near,
                   self.near_result + tail_budget(self.policy, self.threshold))

    def pause_ends_at(self) -> int:
        """The context size from which the back-off after a no-op no longer holds (what a
        notice of it says): grown by the tail budget, or near the window, whichever is first."""
        return min(self.noop_lifts_at(), self._near_from())

    def _blocked(self, now: float) -> tuple[bool, str | None, bool]:
        if not self.policy.auto_compact:
            return True, AUTO_OFF, False
        if now < self.cooldown_until and self.cooldown_kind in HARD_KINDS:
            return True, (f"auto-compaction paused: the summary model failed "
                          f"({self.cooldown_kind}); retrying in "
                          f"{int(self.cooldown_until - now)} s"), False
        if self.strikes >= self.policy.max_strikes and self.blocked_since is not None:
            wait = self.blocked_since + self.policy.probe_after_seconds - now
            if wait <= 0 and not self.probing:
                return False, None, True
            return True, (f"auto-compaction blocked after {self.strikes} ineffective "
                          f"compactions ({self.block_reason}); one retry in "
                          f"{max(0, int(wait))} s — consider starting a new session"), False
        return False, None, False

    def _strike(self, reason: str) -> None:
        self.strikes += 1
        self.block_reason = reason
        if self.strikes >= self.policy.max_strikes:
            self.blocked_since = self.clock()
            self.probing = False

    def _cooling(self) -> bool:
        return self.clock() < self.cooldown_until

    def _cooldown(self, kind: str, now: float) -> None:
        policy = self.policy
        if kind == "timeout":
            ladder = policy.timeout_cooldowns
            seconds = ladder[min(self.timeout_streak, len(ladder) - 1)]
            self.timeout_streak += 1
        elif kind in HARD_KINDS:
            seconds = policy.no_provider_cooldown_seconds
        else:
            seconds = policy.error_cooldown_seconds
        self.cooldown_until = now + seconds
        self.cooldown_kind = kind
