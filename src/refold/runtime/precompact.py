"""Background pre-compaction: compute the next checkpoint before the turn that needs it.

When a session's context crosses a pre-threshold (a fraction of the compaction trigger), the
runtime hands a snapshot of its projection to a ``Precompactor``; a worker thread computes the
checkpoint draft (the slow part: summarizing) while the agent keeps working. The turn that
crosses the trigger then only validates and appends the ready draft.

Invariant: a draft is used only if the view it was planned from is still the latest — no other
checkpoint was added since its snapshot and the snapshot's last row is still active — which the
store checks in the insert's own transaction (``add_checkpoint(expect=plan.base)``); otherwise
it is discarded and the caller compacts synchronously. Messages appended after the snapshot are
fine: they simply extend the kept tail.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from refold._records import dataclass
from refold.store.base import CheckpointBase, CheckpointDraft, Projection, Store

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Plan:
    """A checkpoint draft plus what it was computed from, for validation at swap time."""

    draft: CheckpointDraft
    base_checkpoint_id: int | None  # latest checkpoint when the snapshot was taken
    summarized: tuple[tuple[int, str], ...]  # (seq, identity) of the rows the draft replaces
    report: Any = None  # the compaction report, shown to the caller when the plan is used
    # what it was planned from, so it can be planned again with memory provider notes (same
    # projection, system, tools and target → the same cut, only the summary differs)
    source: Projection | None = None
    target_tokens: int | None = None
    # the view it was planned from, for the store's compare-and-set (None: commit unchecked)
    base: CheckpointBase | None = None


def plan_is_current(store: Store, session_id: str, plan: Plan) -> bool:
    """True when the rows ``plan`` summarizes are unchanged and no checkpoint came in between."""
    latest = store.latest_checkpoint(session_id)
    if (latest.id if latest else None) != plan.base_checkpoint_id:
        return False
    if not plan.summarized:
        return True
    first, last = plan.summarized[0][0], plan.summarized[-1][0]
    rows = store.get_messages(session_id, start_seq=first, end_seq=last, include_inactive=True)
    current = tuple((r.seq, r.identity) for r in rows if r.active)
    if current != plan.summarized:
        return False
    # the tail start must still be an active row (or the next row to come)
    after = store.get_messages(session_id, start_seq=last + 1, limit=1, include_inactive=True)
    return not after or after[0].active


PlanFn = Callable[[Projection], "Plan | None"]


class Precompactor:
    """One background slot per session: at most one plan in flight, at most one ready."""

    def __init__(self, executor: ThreadPoolExecutor) -> None:
        self._executor = executor
        self._lock = threading.Lock()
        self._future: Future[Plan | None] | None = None
        self.started = 0
        self.used = 0
        self.discarded = 0

    @property
    def busy(self) -> bool:
        with self._lock:
            return self._future is not None

    def start(self, projection: Projection, plan_fn: PlanFn) -> bool:
        """Start planning from ``projection`` unless a plan is already in flight or ready."""
        with self._lock:
            if self._future is not None:
                return False
            try:
                self._future = self._executor.submit(self._run, projection, plan_fn)
            except RuntimeError:  # the engine is closing: compact synchronously when needed
                return False
            self.started += 1
            return True

    @staticmethod
    def _run(projection: Projection, plan_fn: PlanFn) -> Plan | None:
        try:
            return plan_fn(projection)
        except Exception as exc:  # a failed plan only means "compact synchronously later"
            log.warning("background pre-compaction failed: %s", exc)
            return None

    def take(self, *, wait: bool) -> Plan | None:
        """The finished plan (waiting for it when ``wait``), clearing the slot; None if none."""
        with self._lock:
            future = self._future
            if future is None or (not wait and not future.done()):
                return None
            self._future = None
        return future.result()

    def discard(self) -> None:
        """Forget the slot (history changed); a running computation finishes and is dropped."""
        with self._lock:
            if self._future is not None:
                self._future.cancel()
                self._future = None
                self.discarded += 1

    def join(self) -> None:
        with self._lock:
            future = self._future
        if future is not None:
            # failures were logged in _run; a cancelled future is fine too
            with contextlib.suppress(Exception):
                future.result()
