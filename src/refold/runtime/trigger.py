"""``Trigger``: one session's "when to compact" state over ``refold.compaction.CompactionGuard``.

The guard (preflight, post-response and overflow entry points; strikes, probes, cooldowns) is
per session, so a thrashing session never blocks another one served by the same engine. The
lock makes it safe to consult from the session's caller thread and its background planner.

No pause is silent: every compaction that stores nothing (no-op, aborted, refused), every due
compaction held back (blocked, cooling down, backing off after a no-op) and every deferral
(``note_deferred``: another compactor holds the lease) leaves a sentence in ``take_warnings``,
which ``prepare`` puts in ``Prepared.warnings`` (the proxy's ``X-Refold-Warnings``).
"""

from __future__ import annotations

import re
import threading
from typing import Any

from refold.compaction import CompactionGuard, CompactionPolicy
from refold.compaction.guard import NOOP_BACKOFF


class Trigger:
    """Per-session trigger decisions, user-visible notices and the summarizer choice."""

    def __init__(self, policy: CompactionPolicy, *, context_length: int, model: str) -> None:
        self.guard = CompactionGuard(policy, context_length=context_length, model=model)
        self.context_length = context_length
        self._lock = threading.Lock()
        self._warnings: list[str] = []
        self._last_notice = ""
        self._cooling_told = 0.0  # the cooldown (its end) the user was last told about

    @property
    def threshold(self) -> int:
        return self.guard.threshold

    @property
    def use_builtin(self) -> bool:
        """The summary model is cooling down after a failure: plan with the builtin summarizer.
        Read from the guard every time, so background plans (which take no decision) and the
        overflow path honor the cooldown too."""
        with self._lock:
            return self.guard.status().cooldown_remaining > 0

    def note_builtin_stands_in(self, name: str) -> None:
        """A plan used the builtin summarizer instead of ``name``: say so once per cooldown."""
        with self._lock:
            status = self.guard.status()
            until = self.guard.cooldown_until
            if status.cooldown_remaining <= 0 or until == self._cooling_told:
                return
            self._cooling_told = until
            self._warnings.append(
                f"the {name} summarizer failed ({status.cooldown_kind}); the builtin summarizer "
                f"stands in for {int(status.cooldown_remaining)} s more")

    def note_request_sent(self) -> None:
        with self._lock:
            self.guard.note_request_sent()

    def note_no_reading(self) -> None:
        """The reply came back without usage (or failed): stop waiting for a real reading."""
        with self._lock:
            self.guard.note_request_failed()

    def preflight(self, tokens: int) -> bool:
        """Compact before sending ``tokens`` (an estimate)? Never on an estimate while a real
        reading is pending — unless the estimate is over the whole window."""
        with self._lock:
            decision = self.guard.preflight(tokens, exact=tokens >= self.context_length)
            return self._take(self._note_pause(decision))

    def post_response(self, prompt_tokens: int) -> bool:
        """Compact after a reply whose real prompt size was ``prompt_tokens``?"""
        with self._lock:
            return self._take(self._note_pause(self.guard.post_response(prompt_tokens)))

    def _note_pause(self, decision: Any) -> Any:
        """A compaction due (over the threshold) but held back by the back-off that follows a
        no-op compaction is reported on every such turn (the back-off is short): no pause is
        silent."""
        remaining = self.guard.noop_until - self.guard.clock()
        if decision.reason == NOOP_BACKOFF:
            self._warnings.append(
                f"auto-compaction paused for {int(remaining) + 1} s more (or until the context "
                f"reaches {self.guard.pause_ends_at()} tokens) after a compaction found nothing "
                f"to summarize; the context is {decision.tokens} tokens "
                f"(threshold {self.guard.threshold})")
        return decision

    def _take(self, decision: Any) -> bool:
        # a held-back notice is shown once per kind, not on every call while it lasts
        if decision.notice:
            kind = re.sub(r"\d+", "#", decision.notice.split("(")[0])
            if kind != self._last_notice:
                self._warnings.append(decision.notice)
            self._last_notice = kind
        elif decision.compact:
            self._last_notice = ""
        return bool(decision.compact)

    def overflow_target(self, attempt: int, rejected_tokens: int) -> int | None:
        """The target after the provider rejected ``rejected_tokens`` (None: give up): the
        guard's shrinking share of the window, capped by the same share of what was rejected
        (the provider's real limit may be below the configured window)."""
        with self._lock:
            decision = self.guard.on_overflow(attempt, rejected_tokens)
        if not decision.compact or decision.target_tokens is None:
            return None
        share = decision.target_tokens / self.context_length
        return max(1, min(decision.target_tokens, int(max(1, rejected_tokens) * share)))

    def record(self, report: Any, *, stored: bool = True) -> None:
        """A compaction's outcome (stored or not: ``stored=False`` when its checkpoint was not
        kept) feeds strikes and cooldowns; a summarizer failure is reported to the user with
        the cooldown it starts (once per cooldown)."""
        with self._lock:
            self.guard.record(report, stored=stored)
            skipped = self._skipped(report)
            if skipped:
                self._warnings.append(skipped)
            if report.status != "fallback":
                return
            failed = next((w for w in report.warnings if "summarizer failed" in w), None)
            seconds = int(self.guard.status().cooldown_remaining)
            if failed is not None and seconds > 0:
                self._cooling_told = self.guard.cooldown_until
                self._warnings.append(f"{failed}; the summary model is not asked again for "
                                      f"{seconds} s")

    def _skipped(self, report: Any) -> str | None:
        """The sentence for a compaction that stored nothing (after ``guard.record``)."""
        status = self.guard.status()
        if report.status == "noop":
            seconds = int(max(0.0, self.guard.noop_until - self.guard.clock())) + 1
            return (f"compaction skipped: {report.reason or 'nothing to summarize'}; "
                    f"auto-compaction waits {seconds} s before trying again, or until the "
                    f"context reaches {self.guard.pause_ends_at()} tokens")
        if report.status == "aborted":
            why = report.reason or report.error_kind or "the summarizer failed"
            return (f"compaction aborted: {why}; this attempt stored nothing, and the summary "
                    f"model is not asked again for {int(status.cooldown_remaining)} s")
        if report.status == "refused":
            return f"compaction refused: {report.reason or 'it would not shrink the context'}"
        return None

    def note_not_stored(self, reason: str) -> None:
        """A compaction was planned but stored nothing (its checkpoint would not move the view
        forward, its cut did not map onto the ledger, it only pruned): the context keeps
        growing toward the window, so the caller hears it on this turn, not at the overflow."""
        with self._lock:
            self._warnings.append(f"compaction not stored: {reason}; the context stays over "
                                  f"the compaction threshold ({self.guard.threshold} tokens)")

    def note(self, sentence: str) -> None:
        """A warning from elsewhere for this turn's ``Prepared.warnings`` (a background memory
        review's refused writes: the turn that started it had already been answered)."""
        with self._lock:
            self._warnings.append(sentence)

    def note_deferred(self, reason: str) -> None:
        """A compaction that was due did not run this turn (``reason`` says why)."""
        with self._lock:
            self._warnings.append(f"compaction deferred: {reason}")

    def auto_allowed(self) -> bool:
        with self._lock:
            return not self.guard.status().blocked

    def status(self) -> dict[str, Any]:
        with self._lock:
            status = self.guard.status()
        return {"blocked": status.blocked, "reason": status.reason, "strikes": status.strikes,
                "cooldown_seconds": round(status.cooldown_remaining, 1)}

    def take_warnings(self) -> list[str]:
        """The warnings since the last take, each once (a turn may plan twice)."""
        with self._lock:
            out, self._warnings = list(dict.fromkeys(self._warnings)), []
            return out
