"""``ContextOps``: the runtime's one seam onto token counting and compaction.

Everything the runtime needs from ``refold.tokens`` and ``refold.compaction`` goes through this
class — count a request, build the model view from a projection, decide whether to compact,
plan a checkpoint (pure: may run on a worker thread, touches no store) and commit it: a
compare-and-set in the store (``add_checkpoint(expect=…)``), so a plan lands only over the view
it was planned from, whoever else — background pre-compaction, another runtime, another
process — is compacting the same session.

The model view of a stored session is: system text, then the checkpoint (its verbatim head
messages, its summary — or the summary merged into the first tail message), then the active rows
from ``tail_start_seq`` on, with any tail outputs compaction downgraded replaced as recorded in
the checkpoint. Planning runs the pure ``compact`` on exactly that view and maps its cut (head
end, tail start) back to ledger seqs, so the stored checkpoint reproduces the compacted list.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from refold.errors import Conflict
from refold.messages.model import Message
from refold.runtime.cost import CostBook, summarizer_model
from refold.runtime.precompact import Plan
from refold.runtime.trigger import Trigger
from refold.store.base import CheckpointBase, Projection, Store

log = logging.getLogger(__name__)

PRE_THRESHOLD_FRACTION = 0.85  # start background pre-compaction at 85% of the trigger
LEASE_WAIT_SECONDS = 10.0  # how long a turn waits for another compactor's checkpoint
LEASE_POLL_SECONDS = 0.02


class ContextOps:
    """Counting, trigger policy and compaction planning for one model and window."""

    def __init__(self, *, model: str, context_length: int, policy: Any | None = None,
                 summarizer: Any | None = None, chat_client: Any | None = None,
                 cost: CostBook | None = None) -> None:
        from refold.compaction import BuiltinSummarizer, CompactionPolicy, threshold_for
        from refold.messages.validate import validate_messages
        from refold.tokens import REPLY_PRIMING, get_counter

        # imported once here (lazily, as the rest): an import statement in a method costs
        # about as much as the small method itself, and these run several times a turn
        self._validate_messages = validate_messages
        self._reply_priming = REPLY_PRIMING
        self.model = model
        self.context_length = context_length
        self.policy = policy if policy is not None else CompactionPolicy()
        self.summarizer = summarizer if summarizer is not None else BuiltinSummarizer()
        self.chat_client = chat_client
        self.cost = cost if cost is not None else CostBook()  # prices, budget, aux charges
        self.counter = get_counter(model)
        self.builtin = BuiltinSummarizer()
        self.threshold = threshold_for(self.policy, context_length, model).tokens
        self.pre_threshold = int(self.threshold * PRE_THRESHOLD_FRACTION)

    def new_trigger(self) -> Trigger:
        """A fresh per-session trigger (anti-thrash state is never shared between sessions)."""
        return Trigger(self.policy, context_length=self.context_length, model=self.model)

    # -- counting -----------------------------------------------------------------------------
    def validate(self, messages: Sequence[Any]) -> list[Message]:
        """The messages checked (``MessageValidationError`` names the index and field) and
        with undecodable text repaired; nothing is stored when any of them is invalid."""
        return self._validate_messages(messages)

    def message_counts(self, messages: Sequence[Message]) -> list[int | None]:
        return list(map(self.counter.count_message, messages))

    def count(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None) -> int:
        return int(self.counter.count_messages(messages) + self.counter.count_tools(tools))

    def base_count(self, message: Message) -> int:
        """The uncalibrated count of one message (the runtime keeps running sums of these)."""
        return int(self.counter.base.count_message(message))

    def total_from_base(self, body: int, tools: Sequence[dict[str, Any]] | None) -> int:
        """``count(messages, tools)`` from ``body`` = the sum of ``base_count`` over messages:
        the calibrated counter scales the whole sum (plus reply priming) once, as here."""
        value = body + self._reply_priming
        if not self.counter.base.exact:
            value = round(value * self.counter.calibration.ratio(self.counter.model))
        return int(value + self.counter.count_tools(tools))

    def base_request(self, body: int, tools: Sequence[dict[str, Any]] | None) -> int:
        """The uncalibrated estimate of a request (what calibration compares readings to)."""
        return int(body + self._reply_priming + self.counter.base.count_tools(tools))

    def observe_estimate(self, base_estimate: int, reported_prompt_tokens: int) -> None:
        """``observe`` for a request whose uncalibrated estimate is already known: O(1)."""
        self.counter.calibration.observe(self.counter.model, base_estimate,
                                         reported_prompt_tokens)

    def observe(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None,
                reported_prompt_tokens: int) -> None:
        """Calibrate estimates from the provider's reading for exactly this request."""
        self.counter.observe_usage(messages, reported_prompt_tokens, tools)

    # -- the model view ------------------------------------------------------------------------
    def build(self, projection: Projection, system_text: str | None) -> list[Message]:
        """System text + checkpoint (head, summary block) + active tail rows (with overrides)."""
        from refold.compaction import projection_messages

        return projection_messages(projection, system_text)

    # -- planning and committing ---------------------------------------------------------------
    def plan(self, projection: Projection, system_text: str | None,
             tools: Sequence[dict[str, Any]] | None, *, trigger: Trigger,
             target_tokens: int | None, speculative: bool = False,
             provider_notes: str | Sequence[str] = (), probe: bool = False) -> Plan | None:
        """A checkpoint draft for ``projection`` (safe on a worker thread; its one write is the
        summary model's usage, charged to the session through ``self.cost``).

        A ``speculative`` (background) plan that comes to nothing is not a strike: only a
        summarizer failure, which starts a cooldown, is recorded. ``provider_notes`` (memory
        providers' ``on_pre_compress`` returns) go into the summary. A ``probe`` plans with the
        builtin summarizer and records nothing: it tells which rows a checkpoint would replace
        (the cut does not depend on the summarizer) before the configured one is asked.
        """
        from refold.compaction import BuiltinSummarizer, compact, projection_messages
        from refold.compaction.session import checkpoint_draft

        view = projection_messages(projection, system_text)
        summarizer = self.builtin if probe else self.summarizer
        if not isinstance(summarizer, BuiltinSummarizer) and trigger.use_builtin:  # cooling down
            if getattr(summarizer, "abort_on_failure", False):
                # abort_on_summary_failure: no builtin summary ever (it stood in the next turn,
                # after a warning that said the transcript was kept as it was)
                if not speculative:
                    trigger.note_deferred("the summary model is cooling down after a failure, "
                                          "and abort_on_summary_failure keeps the builtin "
                                          "summarizer from standing in")
                return None
            trigger.note_builtin_stands_in(str(getattr(summarizer, "name", "configured")))
            summarizer = self.builtin
        result = compact(view, context_length=self.context_length, policy=self.policy,
                         counter=self.counter, summarizer=summarizer, fallback=self.builtin,
                         model=self.model, target_tokens=target_tokens, tools=tools,
                         compaction_count=1 if projection.checkpoint else 0,
                         provider_notes=provider_notes, own_system=1 if system_text else 0)
        report = result.report
        if report.usage:  # paid for whether or not the checkpoint is kept
            self.cost.charge(projection.session_id, report.usage,
                             summarizer_model(report.summarizer), what="summary")
        draft = None
        if report.changed and report.summary is not None:
            draft = checkpoint_draft(projection, view, result, 1 if system_text else 0)
        if draft is None:
            why = ("the summarized stretch did not line up with the stored messages"
                   if report.changed and report.summary is not None else
                   f"{report.status}: {report.reason}")
            if not probe and (not speculative or report.status == "aborted"):
                trigger.record(report, stored=False)
                if report.status in ("ok", "fallback", "pruned"):  # (the others say so)
                    trigger.note_not_stored(why if report.summary else
                                            f"nothing was summarized ({report.reason})")
            # (the log said "compaction not stored: ok (compacted)" for a tail that did not
            # line up)
            log.info("compaction not stored: %s", why)
            return None
        rows = [r for r in projection.messages if r.seq < draft.tail_start_seq]
        return Plan(draft=draft,
                    base_checkpoint_id=projection.base_checkpoint_id,
                    summarized=tuple((r.seq, r.identity) for r in rows), report=report,
                    source=projection, target_tokens=target_tokens,
                    base=CheckpointBase.of(projection))

    @property
    def summarizes_builtin(self) -> bool:
        from refold.compaction import BuiltinSummarizer

        return isinstance(self.summarizer, BuiltinSummarizer)

    def commit(self, store: Store, session_id: str, plan: Plan, *, trigger: Trigger) -> Any:
        """Append ``plan``'s checkpoint if the view it was planned from is still the latest; its
        report, or None when it was dropped (another compactor got there first, or the history
        was rewound under it): the caller re-reads the view and, if still needed, re-plans."""
        try:
            store.add_checkpoint(session_id, plan.draft, expect=plan.base)
        except Conflict as exc:
            log.info("compaction plan dropped: %s", exc.message)
            if exc.details.get("reason") != "stale":  # (stale: another compactor's landed)
                trigger.note_not_stored(exc.message)
            return None
        trigger.record(plan.report)
        return plan.report


    def take_lease(self, store: Store, session_id: str, holder: str,
                   seen_checkpoint: int | None, *, wait: float | None = None
                   ) -> bool | None:
        """The session's compaction lease, so one compactor plans at a time (one summarizer
        call per window, across processes). True: ours (``release_lease`` it). None: another
        compactor committed a checkpoint while we waited (re-read the view). False: still held
        after ``wait`` seconds (go on with the current view). A lease dies with its holder (see
        the stores), so a killed compactor holds nobody up."""
        name = f"compact:{session_id}"
        deadline = time.monotonic() + (LEASE_WAIT_SECONDS if wait is None else wait)
        while True:
            if store.acquire_lease(name, holder, self.policy.lease_seconds):
                return True
            if store.view_tip(session_id).checkpoint_id != seen_checkpoint:
                return None
            if time.monotonic() >= deadline:
                log.warning("session %s: another compactor holds the lease; going on without "
                            "compacting", session_id)
                return False
            time.sleep(LEASE_POLL_SECONDS)
