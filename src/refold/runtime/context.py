"""``ContextOps``: the runtime's one seam onto token counting and compaction.

Everything the runtime needs from ``refold.tokens`` and ``refold.compaction`` goes through this
class — count a request, build the model view from a projection, decide whether to compact,
plan a checkpoint (pure: may run on a worker thread, touches no store) and commit it (on the
caller's thread, under the session's compaction lease).

The model view of a stored session is: system text, then the checkpoint (its verbatim head
messages, its summary — or the summary merged into the first tail message), then the active rows
from ``tail_start_seq`` on, with any tail outputs compaction downgraded replaced as recorded in
the checkpoint. Planning runs the pure ``compact`` on exactly that view and maps its cut (head
end, tail start) back to ledger seqs, so the stored checkpoint reproduces the compacted list.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

from refold.errors import Conflict
from refold.messages.model import Message, content_text
from refold.runtime.guard import TriggerGuard
from refold.runtime.precompact import Plan, plan_is_current
from refold.store.base import CheckpointDraft, Projection, Store

log = logging.getLogger(__name__)

PRE_THRESHOLD_FRACTION = 0.85  # start background pre-compaction at 85% of the trigger


class ContextOps:
    """Counting, trigger policy and compaction planning for one model and window."""

    def __init__(self, *, model: str, context_length: int, policy: Any | None = None,
                 summarizer: Any | None = None, chat_client: Any | None = None) -> None:
        from refold.compaction.builtin import BuiltinSummarizer
        from refold.compaction.policy import CompactionPolicy, threshold_for
        from refold.tokens import get_counter

        self.model = model
        self.context_length = context_length
        self.policy = policy if policy is not None else CompactionPolicy()
        self.summarizer = summarizer if summarizer is not None else BuiltinSummarizer()
        self.chat_client = chat_client
        self.counter = get_counter(model)
        self.threshold = threshold_for(self.policy, context_length, model).tokens
        self.pre_threshold = int(self.threshold * PRE_THRESHOLD_FRACTION)
        self.guard = TriggerGuard(self.policy, self.threshold)
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
        """System text + checkpoint (head, summary block) + active tail rows (with overrides)."""
        out: list[Message] = []
        if system_text:
            out.append({"role": "system", "content": system_text})
        checkpoint = projection.checkpoint
        details = checkpoint.details if checkpoint else {}
        overrides = {int(k): v for k, v in (details.get("overrides") or {}).items()}
        if checkpoint is not None:
            out.extend(dict(m) for m in details.get("head") or [])
            block = details.get("block")
            if block is None:
                block = [{"role": checkpoint.summary_role or "user",
                          "content": checkpoint.summary}]
            out.extend(dict(m) for m in block)
        out.extend(dict(overrides.get(row.seq, row.message)) for row in projection.messages)
        return out

    def breakdown(self, projection: Projection, *, system_prompt: str | None, snapshot: str,
                  tools: Sequence[dict[str, Any]] | None) -> dict[str, Any]:
        """Tokens by part of the window, for gauges and ``refold context``."""
        count = self.counter.count_text
        checkpoint = projection.checkpoint
        parts: dict[str, int] = {
            "system": count(system_prompt or ""), "memory": count(snapshot or ""),
            "summary": count(checkpoint.summary) if checkpoint else 0,
            "tools": self.counter.count_tools(tools)}
        by_role: dict[str, int] = {}
        tool_outputs = 0
        view = self.build(projection, None)
        skip = len(view) - len(projection.messages)
        for message in view[skip:]:
            n = self.counter.count_message(message)
            role = str(message.get("role"))
            by_role[role] = by_role.get(role, 0) + n
            if role == "tool":
                tool_outputs += n
        total = self.count(self.build(projection, _join(system_prompt, snapshot)), tools)
        return {"parts": parts, "tail_by_role": by_role, "tool_outputs": tool_outputs,
                "tail_messages": len(projection.messages), "total": total,
                "threshold": self.threshold, "context_length": self.context_length,
                "checkpoint_id": checkpoint.id if checkpoint else None,
                "fraction_of_threshold": round(total / self.threshold, 4) if self.threshold
                else 0.0, "auto_compaction": self.guard.status()}

    # -- policy -----------------------------------------------------------------------------------
    def should_compact(self, tokens: int, *, real: bool, pending: bool) -> bool:
        """The trigger: over the threshold, allowed by anti-thrash, not on a pending estimate."""
        with self._lock:
            if real:
                self.guard.observe_reading(tokens)
            if tokens < self.threshold:
                return False
            if pending and not real and tokens < self.context_length:
                # a real reading for the last request is on its way; don't act on an estimate
                return False
            allowed, why = self.guard.allows(tokens)
            if not allowed and why:
                self._warnings.append(why)
            return allowed

    def auto_allowed(self) -> bool:
        with self._lock:
            return self.guard.allows(self.threshold)[0]

    def take_warnings(self) -> list[str]:
        with self._lock:
            out, self._warnings = self._warnings, []
            return out

    def overflow_target(self, attempt: int, rejected_tokens: int) -> int:
        """The target after the provider rejected ``rejected_tokens``: a shrinking share of
        the smaller of that and the window (the provider's real limit may be below ours)."""
        targets = self.policy.overflow_targets
        base = min(self.context_length, max(1, rejected_tokens))
        return max(1, int(base * targets[min(attempt, len(targets) - 1)]))

    # -- planning and committing ---------------------------------------------------------------
    def plan(self, projection: Projection, system_text: str | None,
             tools: Sequence[dict[str, Any]] | None, *, target_tokens: int | None,
             force: bool) -> Plan | None:
        """A checkpoint draft for ``projection`` (pure; safe on a worker thread)."""
        from refold.compaction.core import compact
        from refold.compaction.summary import SUMMARY_KEY, is_summary_message

        view = self.build(projection, system_text)
        offset = len(view) - len(projection.messages)  # system + head + separate summary
        result = compact(view, context_length=self.context_length, policy=self.policy,
                         counter=self.counter, summarizer=self.summarizer, model=self.model,
                         target_tokens=target_tokens, tools=tools,
                         compaction_count=1 if projection.checkpoint else 0)
        report = result.report
        if report.status not in ("ok", "fallback") or report.summary is None:
            with self._lock:
                self.guard.record_failure(report.status, report.reason)
            log.info("compaction not applied: %s (%s)", report.status, report.reason)
            return None
        if report.tail_start < offset or report.tail_start > len(view):
            return None  # the cut fell inside the previous checkpoint: nothing storable
        draft = _draft(projection, view, result.messages, report, offset)
        if not all(m.get(SUMMARY_KEY) or is_summary_message(m)
                   for m in draft.details["block"]):
            log.warning("compaction result does not map onto the ledger; not stored")
            return None
        rows = projection.messages[:report.tail_start - offset]
        return Plan(draft=draft,
                    base_checkpoint_id=projection.checkpoint.id if projection.checkpoint
                    else None,
                    summarized=tuple((r.seq, r.identity) for r in rows), report=report)

    def commit(self, store: Store, session_id: str, plan: Plan, *, holder: str,
               validate: bool = False) -> Any:
        """Append ``plan``'s checkpoint under the session's lease; its report, or None.

        With ``validate`` the plan is first checked against the ledger (under the lease, so no
        other compactor can slip in between) and dropped when it no longer matches.
        """
        lease = f"compact:{session_id}"
        if not store.acquire_lease(lease, holder, self.policy.lease_seconds):
            raise Conflict(f"session {session_id} is being compacted by another process",
                           hint="retry in a moment")
        try:
            if validate and not plan_is_current(store, session_id, plan):
                return None
            store.add_checkpoint(session_id, plan.draft)
        finally:
            store.release_lease(lease, holder)
        with self._lock:
            self.guard.record_compaction(plan.draft.tokens_before, plan.draft.tokens_after)
        return plan.report


def _draft(projection: Projection, view: list[Message], compacted: list[Message],
           report: Any, offset: int) -> CheckpointDraft:
    """Map the pure result's cut back onto ledger seqs.

    ``compacted`` is head + summary block (the summary, maybe an acknowledgement) + tail; the
    tail is the last ``len(rows) - tail_index`` messages, compared row by row with the ledger so
    outputs compaction downgraded are recorded as overrides (the ledger keeps the originals).
    """
    rows = projection.messages
    tail_index = report.tail_start - offset
    tail_rows = rows[tail_index:]
    tail_start_seq = tail_rows[0].seq if tail_rows else (rows[-1].seq + 1 if rows else 0)
    previous = projection.checkpoint
    summarized = rows[:tail_index]
    first_seq = previous.first_seq if previous else (summarized[0].seq if summarized
                                                     else tail_start_seq)
    last_seq = summarized[-1].seq if summarized else (previous.last_seq if previous
                                                      else tail_start_seq - 1)
    system_n = 1 if view and view[0].get("role") in ("system", "developer") else 0
    head_end = min(report.head_end, len(compacted))
    kept = compacted[len(compacted) - len(tail_rows):] if tail_rows else []
    block_end = len(compacted) - len(tail_rows)
    details: dict[str, Any] = {
        "head": [dict(m) for m in compacted[system_n:head_end]],
        "block": [dict(m) for m in compacted[head_end:block_end]],
        "summarized": report.summarized, "language": report.language}
    overrides = {str(row.seq): m for row, m in zip(tail_rows, kept, strict=True)
                 if m != row.message}
    if overrides:
        details["overrides"] = overrides
    return CheckpointDraft(
        summary=report.summary, first_seq=first_seq, last_seq=last_seq,
        tail_start_seq=tail_start_seq, anchors=list(report.anchors),
        tokens_before=report.tokens_before, tokens_after=report.tokens_after,
        summarizer=report.summarizer, status="ok" if report.status == "ok" else "fallback",
        summary_role=report.summary_role or "user", details=details)


def _join(system_prompt: str | None, snapshot: str) -> str | None:
    parts = [p for p in (system_prompt, snapshot) if p]
    return "\n\n".join(parts) if parts else None


def summary_text(message: Message) -> str:
    return content_text(message)
