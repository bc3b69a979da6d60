"""Anti-thrash for a session's automatic compaction: strikes, back-off, cooldowns, probes.

Rules (defaults from ``CompactionPolicy``):
- a compaction whose next real reading is still over the threshold is a strike; so is one
  compaction refuses because it would not shrink the context;
- ``max_strikes`` (2) strikes block automatic compaction; a blocked session gets one probe
  after ``probe_after_seconds`` (300 s); a successful compaction clears the strikes;
- a structural no-op (too few messages, nothing between head and tail) backs off without a
  strike until the context has grown by a tenth of the threshold;
- a summarizer abort (auth, network, truncation) cools down for ``error_cooldown_seconds``.
Explicit compaction (``/compact``, overflow recovery) is never blocked by the guard.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


class TriggerGuard:
    """Whether automatic compaction may run now, and why not."""

    def __init__(self, policy: Any, threshold: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.policy = policy
        self.threshold = threshold
        self.clock = clock
        self.strikes = 0
        self.blocked_at: float | None = None
        self.cooldown_until = 0.0
        self.backoff_until_tokens = 0
        self._awaiting_reading = False
        self._last_tokens = 0

    def allows(self, tokens: int) -> tuple[bool, str | None]:
        self._last_tokens = tokens
        now = self.clock()
        if now < self.cooldown_until:
            return False, (f"auto-compaction paused for {self.cooldown_until - now:.0f}s after "
                           "a summarizer failure")
        if tokens < self.backoff_until_tokens:
            return False, None  # structural no-op: wait for the context to grow
        if self.blocked_at is not None:
            if now - self.blocked_at < self.policy.probe_after_seconds:
                return False, (f"auto-compaction blocked: {self.strikes} compactions in a row "
                               "did not bring the context under the threshold; use /compact "
                               "or start a new session")
            self.blocked_at = now  # one probe, then wait another window
        return True, None

    def record_compaction(self, before: int, after: int) -> None:
        self.backoff_until_tokens = 0
        self._awaiting_reading = True
        if after >= self.threshold:
            self._strike()

    def observe_reading(self, tokens: int) -> None:
        """A real provider reading after a compaction: still over the threshold is a strike."""
        if not self._awaiting_reading:
            return
        self._awaiting_reading = False
        if tokens >= self.threshold:
            self._strike()
        else:
            self.strikes = 0
            self.blocked_at = None

    def record_failure(self, status: str, reason: str) -> None:
        if status == "refused":
            self._strike()
        elif status in ("noop", "pruned"):
            self.backoff_until_tokens = self._last_tokens + max(1, self.threshold // 10)
        elif status == "aborted":
            self.cooldown_until = self.clock() + self.policy.error_cooldown_seconds

    def _strike(self) -> None:
        self.strikes += 1
        if self.strikes >= self.policy.max_strikes and self.blocked_at is None:
            self.blocked_at = self.clock()

    def status(self) -> dict[str, Any]:
        return {"strikes": self.strikes, "blocked": self.blocked_at is not None,
                "cooling_down": self.clock() < self.cooldown_until}
