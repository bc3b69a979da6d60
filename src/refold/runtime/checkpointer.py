"""``Checkpointer``: when and how one session's context is compacted.

It owns the session's ``Trigger`` (preflight, post-response and overflow decisions, anti-thrash
state, warnings) and its ``Precompactor`` (the background plan), and it is the one place that
plans, commits and — with ``rotate_on_compaction`` — rotates (``refold.runtime.rotation``).
What fills the window (``breakdown``) is measured here too, with the same counter and view the
decisions use.

Committing goes through ``ContextOps.commit``: a compare-and-set in the store, so a plan lands
only over the view it was planned from (one compaction per window, whoever else compacts).
Planning runs under the session's compaction lease (``ContextOps.take_lease``), the background
plan's too (it gives up when the lease is held); contention never fails the turn (when another
holds it too long, the turn goes on and a warning says so). The mirror's view is dropped before
every commit, so the next read sees the checkpoint. Every successful commit passes
``_committed``: the rows it replaced are queued for memory flush (``refold.runtime.memory_flush``),
then the session rotates if configured.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from refold.runtime.mirror import SessionMirror
from refold.runtime.precompact import Plan, Precompactor
from refold.runtime.recall import with_recall
from refold.runtime.rotation import rotate_session
from refold.runtime.view import ViewCache
from refold.store.base import Projection

if TYPE_CHECKING:
    from refold.runtime.context import ContextOps
    from refold.runtime.host import RuntimeHost

log = logging.getLogger(__name__)

MAX_OVERFLOW_ATTEMPTS = 4
Tools = list[dict[str, Any]] | None


class Checkpointer:
    """Compaction decisions and their execution for the session ``mirror`` follows."""

    def __init__(self, host: RuntimeHost, mirror: SessionMirror,
                 system_text: Callable[[], str | None], tools: Callable[[], Tools],
                 recall: Callable[[], str]) -> None:
        self._host = host
        self._mirror = mirror
        self._system_text = system_text
        self._tools = tools
        self._recall = recall
        self.trigger = host.ops.new_trigger()
        self.precompactor = Precompactor(host.executor)
        self._holder = f"{host.holder}/{id(self):x}"  # this session's compaction lease
        # (tokens before, after) of a compaction no request reported yet (post-response,
        # overflow): the proxy's X-Refold-Compacted
        self.notice: tuple[int, int] | None = None

    @property
    def _ops(self) -> ContextOps:
        return self._host.ops

    @property
    def _session_id(self) -> str:
        return self._mirror.session_id

    @property
    def light_limit(self) -> int:
        """Tokens from which a turn may compact or start a background pre-compaction."""
        return int(min(self._ops.threshold, self._ops.pre_threshold))

    def measure(self, projection: Projection) -> int:
        """The request size ``projection`` gives with the current system text and recall."""
        built = with_recall(self._ops.build(projection, self._system_text()), self._recall())
        return int(self._ops.count(built, self._tools()))

    # -- the three triggers ------------------------------------------------------------------
    def preflight(self, tokens: int, view: ViewCache) -> Any:
        """Before a request of ``tokens``: the compaction report when it compacted."""
        if not self.trigger.preflight(tokens):
            return None
        return self._swap_or_compact(view.snapshot())

    def post_response(self, real_tokens: int | None) -> None:
        """After the provider's reading of the last request (None: it gave none)."""
        if real_tokens is None:
            self.trigger.note_no_reading()
            return
        if self.trigger.post_response(real_tokens):
            if self._swap_or_compact(self._mirror.current_view().snapshot()) is not None:
                self.notice = (real_tokens, self.measure(self._mirror.read_projection()))
        elif real_tokens >= self._ops.pre_threshold:
            self.maybe_precompact(real_tokens)

    def after_overflow(self, attempt: int, last_sent: int | None) -> tuple[int, int] | None:
        """The provider rejected the request as too long: compact further. (size before,
        size after), or None when nothing was compacted."""
        if attempt >= MAX_OVERFLOW_ATTEMPTS:
            return None
        projection = self._mirror.read_projection()
        before = self.measure(projection)
        target = self.trigger.overflow_target(attempt, last_sent or before)
        if target is None:
            return None
        self.precompactor.discard()
        report = self._compact_now(projection, target_tokens=target)
        after = self.measure(self._mirror.read_projection())
        if report is None and after >= before:  # nobody compacted (or not enough)
            return None
        return before, after

    def compact(self, *, force: bool) -> Any:
        """Compact now (``/compact``); without ``force`` only over the threshold."""
        projection = self._mirror.read_projection()
        if not force and self.measure(projection) < self._ops.threshold:
            return None
        self.precompactor.discard()
        return self._compact_now(projection, target_tokens=None)

    # -- planning and committing -------------------------------------------------------------
    def _swap_or_compact(self, projection: Projection) -> Any:
        """Use the background plan if it is ready and still valid, else compact now."""
        plan = self.precompactor.take(wait=True) if self.precompactor.busy else None
        if plan is not None:
            report = self._commit(plan)
            if report is not None:
                self.precompactor.used += 1
                after = self.measure(self._mirror.read_projection())
                if after < self._ops.threshold:
                    return report
                projection = self._mirror.read_projection()
            else:
                self.precompactor.discarded += 1
        return self._compact_now(projection, target_tokens=None)

    def _commit(self, plan: Plan) -> Any:
        """Commit the background plan: the store's compare-and-set drops it when the view moved
        (another compactor, a rewind) since its snapshot."""
        plan = self._with_provider_notes(plan, validate=True)
        self._mirror.view = None  # a checkpoint is coming: the next turn reads the projection
        report = self._ops.commit(self._host.store, self._session_id, plan, trigger=self.trigger)
        if report is None:
            log.info("session %s: background plan outdated, discarded", self._session_id)
        else:
            self._committed(plan)
        return report

    def _compact_now(self, projection: Projection, *, target_tokens: int | None) -> Any:
        """Plan from the latest view and commit, under the session's compaction lease. Another
        compactor never fails the turn: when it committed meanwhile and its view fits, that
        view is used (the mirror's view is dropped, so the caller re-reads it); when it holds
        the lease too long, the turn goes on uncompacted."""
        store, session_id = self._host.store, self._session_id
        seen = projection.base_checkpoint_id
        taken = self._ops.take_lease(store, session_id, self._holder, seen)
        if not taken:
            self._mirror.view = None
            if taken is False:  # None: another compactor committed meanwhile (not a skip)
                self.trigger.note_deferred("another compactor has held this session's "
                                           "compaction lease too long; this request goes "
                                           "uncompacted")
            return None
        try:
            fresh = self._mirror.read_projection()  # (a client's sliding window: its rows)
            if fresh.base_checkpoint_id != seen and \
                    self.measure(fresh) < (target_tokens or self._ops.threshold):
                self._mirror.view = None
                return None  # another compactor did it while we waited for the lease
            plan = self._plan_now(fresh, target_tokens)
            if plan is None:
                return None
            self._mirror.view = None  # a checkpoint is coming: the next turn reads the projection
            report = self._ops.commit(store, session_id, plan, trigger=self.trigger)
        finally:
            store.release_lease(f"compact:{session_id}", self._holder)
        if report is not None:
            self._committed(plan)
        return report

    def _plan_now(self, projection: Projection, target_tokens: int | None) -> Plan | None:
        """A plan to commit now, with memory provider notes in its summary. With an external
        provider the rows are found by a builtin probe first (the cut does not depend on the
        summarizer), so the configured summarizer runs once, already given the notes."""
        memory = self._host.memory
        system, tools = self._system_text(), self._tools()

        def plan(notes: str = "", probe: bool = False) -> Plan | None:
            return self._ops.plan(projection, system, tools, trigger=self.trigger,
                                  target_tokens=target_tokens, provider_notes=notes,
                                  probe=probe)

        if memory is None or not memory.has_external:
            return plan()
        probe = plan(probe=True)
        if probe is None:  # the builtin would store nothing: ask the configured one (late hook)
            first = plan()
            return self._with_provider_notes(first) if first is not None else None
        notes = self._host.pre_compress(self._session_id, probe)
        final = probe if not notes and self._ops.summarizes_builtin else plan(notes)
        if final is not None and final.summarized != probe.summarized:
            log.info("session %s: the summarizer changed the cut after the memory hook",
                     self._session_id)
        return final

    def _with_provider_notes(self, plan: Plan, *, validate: bool = False) -> Plan:
        """A ready plan (the background one): memory providers see the rows ``plan`` replaces
        (``on_pre_compress``); when they return text, the plan is computed again from the same
        projection with those notes so the summary keeps them. The cut is the same
        (only the summary differs); if it is not, or the second plan fails, the first plan is
        used and the notes are dropped (logged) — a hook never stops a compaction."""
        notes = self._host.pre_compress(self._session_id, plan, validate=validate)
        if not notes or plan.source is None:
            return plan
        noted = self._ops.plan(plan.source, self._system_text(), self._tools(),
                               trigger=self.trigger, target_tokens=plan.target_tokens,
                               provider_notes=notes)
        if noted is None or noted.summarized != plan.summarized \
                or noted.base_checkpoint_id != plan.base_checkpoint_id:
            log.warning("session %s: memory provider notes not kept (the plan changed)",
                        self._session_id)
            return plan
        return noted

    def _committed(self, plan: Plan) -> None:
        """After every checkpoint commit (the one place all three triggers pass): the rows it
        replaced go to memory review in the background — the whole session when it rotates
        away — and then, with ``rotate_on_compaction``, the session rotates."""
        if self._ops.policy.rotate_on_compaction:
            self._host.memory_flush(self._session_id, None)
        elif plan.summarized:
            self._host.memory_flush(self._session_id, plan.summarized[-1][0])
        self._maybe_rotate()

    def _maybe_rotate(self) -> None:
        """With ``rotate_on_compaction``, continue in a child session (Hermes' P-chain)."""
        if not self._ops.policy.rotate_on_compaction:
            return
        child = rotate_session(self._host.store, self._session_id, self._ops.message_counts)
        self._mirror.moved_to(child)

    def maybe_precompact(self, tokens: int, view: ViewCache | None = None) -> None:
        """From the pre-threshold on, plan the next checkpoint on a worker thread."""
        if not self._host.background_precompact or self.precompactor.busy:
            return
        if tokens < self._ops.pre_threshold or not self.trigger.auto_allowed():
            return
        projection = (view or self._mirror.current_view()).snapshot()  # the worker's own copies
        system = self._system_text()
        tools = self._tools()
        trigger = self.trigger
        ops = self._ops
        store, session_id = self._host.store, self._session_id
        lease, holder = f"compact:{session_id}", f"{self._holder}/background"

        def plan_fn(snapshot: Projection) -> Plan | None:
            # planned under the session's compaction lease, like a foreground compaction: while
            # another compactor (another process, another runtime) plans this window, no
            # second summary of it is made; one committed since the snapshot makes it stale
            if not store.acquire_lease(lease, holder, ops.policy.lease_seconds):
                log.info("session %s: another compactor holds the lease; no background plan",
                         session_id)
                return None
            try:
                seen = snapshot.base_checkpoint_id
                if store.view_tip(session_id).checkpoint_id != seen:
                    return None
                return ops.plan(snapshot, system, tools, trigger=trigger,
                                target_tokens=None, speculative=True)
            finally:
                store.release_lease(lease, holder)

        self.precompactor.start(projection, plan_fn)

    # -- inspection --------------------------------------------------------------------------
    def breakdown(self, system_prompt: str | None, snapshot: str) -> dict[str, Any]:
        """What fills the window: the parts as ``refold context`` counts them (the one
        count, ``refold.compaction.session.context_breakdown``: system, memory, summary, head,
        tools), the tail by role, and the total as really sent (recall included), with the
        trigger's state."""
        from refold.compaction.session import context_breakdown  # lazy, as in ContextOps

        ops = self._ops
        projection = self._mirror.read_projection()
        found = context_breakdown(projection, context_length=ops.context_length,
                                  model=ops.model, counter=ops.counter,
                                  system_prompt=system_prompt, memory=snapshot,
                                  tools=self._tools(), policy=ops.policy)
        parts = {k: v for k, v in found.parts.items()
                 if not k.startswith("tail:") and k != "tool_outputs"}
        total = self.measure(projection)
        threshold = ops.threshold
        return {"session_id": self._session_id, "parts": parts,
                "tail_by_role": {k[5:]: v for k, v in found.parts.items()
                                 if k.startswith("tail:")},
                "tool_outputs": found.parts.get("tool_outputs", 0),
                "tail_messages": len(projection.messages), "total": total,
                "threshold": threshold, "context_length": ops.context_length,
                "checkpoint_id": found.checkpoint_id,
                "percent_of_window": round(100.0 * total / ops.context_length, 1),
                "fraction_of_threshold": round(total / threshold, 4) if threshold else 0.0,
                "auto_compaction": self.trigger.status()}
