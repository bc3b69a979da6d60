"""``ContextOps``: the runtime's one seam onto token counting and compaction.

Everything the runtime needs from ``refold.tokens`` and ``refold.compaction`` goes through this
class — count a request, build the model view from a projection, decide whether to compact
(trigger policy with anti-thrash), plan a checkpoint (pure: may run on a worker thread, touches
no store) and commit it (on the caller's thread, under the session's compaction lease).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

from refold.errors import Conflict
from refold.messages.model import Message, content_text
from refold.runtime.precompact import Plan, plan_is_current
from refold.store.base import Projection, Store

log = logging.getLogger(__name__)

PRE_THRESHOLD_FRACTION = 0.85  # start background pre-compaction at 85% of the trigger
LEASE_SECONDS = 120.0


class ContextOps:
    """Counting, trigger policy and compaction planning for one model and window."""

    def __init__(self, *, model: str, context_length: int, policy: Any | None = None,
                 summarizer: Any | None = None, chat_client: Any | None = None) -> None:
        from refold.compaction import CompactionPolicy, TriggerState, builtin_summarizer
        from refold.tokens import get_counter

        self.model = model
        self.context_length = context_length
        self.policy = policy if policy is not None else CompactionPolicy()
        self.summarizer = summarizer if summarizer is not None else builtin_summarizer()
        self.chat_client = chat_client
        self.counter = get_counter(model)
        self.trigger = TriggerState(self.policy, context_length=context_length, model=model)
        self.threshold = int(self.trigger.threshold)
        self.pre_threshold = int(self.threshold * PRE_THRESHOLD_FRACTION)
        self._lock = threading.Lock()
        self._warnings: list[str] = []

    # -- counting -----------------------------------------------------------------------------
    def validate(self, messages: list[Message]) -> None:
        from refold.messages.validate import validate_messages

        validate_messages(messages)

    def message_counts(self, messages: Sequence[Message]) -> list[int | None]:
        return [self.counter.count_message(m) for m in messages]

    def count(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None) -> int:
        return int(self.counter.count_messages(messages) + self.counter.count_tools(tools))

    def observe(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None,
                reported_prompt_tokens: int) -> None:
        """Calibrate estimates from the provider's reading for exactly this request."""
        self.counter.observe_usage(messages, reported_prompt_tokens, tools)

    # -- the model view ------------------------------------------------------------------------
    def build(self, projection: Projection, system_text: str | None) -> list[Message]:
        from refold.compaction import projection_messages

        return list(projection_messages(projection, system_text))

    def breakdown(self, projection: Projection, *, system_prompt: str | None, snapshot: str,
                  tools: Sequence[dict[str, Any]] | None) -> dict[str, Any]:
        """Tokens by part of the window, for gauges and ``refold context``."""
        count = self.counter.count_text
        parts: dict[str, int] = {
            "system": count(system_prompt or ""), "memory": count(snapshot or ""),
            "summary": count(projection.checkpoint.summary) if projection.checkpoint else 0,
            "tools": self.counter.count_tools(tools)}
        by_role: dict[str, int] = {}
        tool_outputs = 0
        for row in projection.messages:
            n = self.counter.count_message(row.message)
            by_role[row.role] = by_role.get(row.role, 0) + n
            if row.role == "tool":
                tool_outputs += n
        total = self.count(self.build(projection, _join(system_prompt, snapshot)), tools)
        return {"parts": parts, "tail_by_role": by_role, "tool_outputs": tool_outputs,
                "tail_messages": len(projection.messages), "total": total,
                "threshold": self.threshold, "context_length": self.context_length,
                "checkpoint_id": projection.checkpoint.id if projection.checkpoint else None,
                "fraction_of_threshold": round(total / self.threshold, 4) if self.threshold
                else 0.0, "auto_compaction": self.trigger.status()}

    # -- policy -----------------------------------------------------------------------------------
    def should_compact(self, tokens: int, *, real: bool, pending: bool) -> bool:
        """The trigger: over the threshold, allowed by anti-thrash, not on a pending estimate."""
        with self._lock:
            if real:
                self.trigger.observe_reading(tokens)
            if tokens < self.threshold:
                return False
            if pending and not real and tokens < self.context_length:
                # a real reading for the last request is on its way; don't act on an estimate
                return False
            allowed, why = self.trigger.allows()
            if not allowed and why:
                self._warnings.append(why)
            return allowed

    def auto_allowed(self) -> bool:
        with self._lock:
            return self.trigger.allows()[0]

    def take_warnings(self) -> list[str]:
        with self._lock:
            out, self._warnings = self._warnings, []
            return out

    def overflow_target(self, attempt: int) -> int:
        return int(self.context_length * self.policy.overflow_fraction(attempt))

    # -- planning and committing ---------------------------------------------------------------
    def plan(self, projection: Projection, system_text: str | None,
             tools: Sequence[dict[str, Any]] | None, *, target_tokens: int | None,
             force: bool) -> Plan | None:
        """A checkpoint draft for ``projection`` (pure; safe on a worker thread)."""
        from refold.compaction import plan_checkpoint

        result = plan_checkpoint(projection, system_text, policy=self.policy,
                                 counter=self.counter, summarizer=self.summarizer,
                                 context_length=self.context_length,
                                 target_tokens=target_tokens, tools=tools, force=force)
        if result is None:
            return None
        draft, report = result
        summarized = tuple((r.seq, r.identity) for r in projection.messages
                           if draft.first_seq <= r.seq <= draft.last_seq)
        base = projection.checkpoint.id if projection.checkpoint else None
        return Plan(draft=draft, base_checkpoint_id=base, summarized=summarized, report=report)

    def commit(self, store: Store, session_id: str, plan: Plan, *, holder: str,
               validate: bool = False) -> Any:
        """Append ``plan``'s checkpoint under the session's lease; its report, or None.

        With ``validate`` the plan is first checked against the ledger (under the lease, so no
        other compactor can slip in between) and dropped when it no longer matches.
        """
        lease = f"compact:{session_id}"
        if not store.acquire_lease(lease, holder, LEASE_SECONDS):
            raise Conflict(f"session {session_id} is being compacted by another process",
                           hint="retry in a moment")
        try:
            if validate and not plan_is_current(store, session_id, plan):
                return None
            store.add_checkpoint(session_id, plan.draft)
        finally:
            store.release_lease(lease, holder)
        with self._lock:
            self.trigger.record_compaction(plan.draft.tokens_before, plan.draft.tokens_after)
        return plan.report


def _join(system_prompt: str | None, snapshot: str) -> str | None:
    parts = [p for p in (system_prompt, snapshot) if p]
    return "\n\n".join(parts) if parts else None


def summary_text(message: Message) -> str:
    return content_text(message)
