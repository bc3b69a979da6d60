"""Memory flush: what a session said is reviewed for memory before it leaves the context.

When a checkpoint is committed (foreground, background pre-compaction, overflow recovery: the
one commit point, ``Checkpointer._committed``) and when a session ends (``SessionRuntime.close``,
the proxy's eviction, ``Engine.close`` — which ``refold chat`` calls on exit), the memory
reviewer (``refold.memory.review.MemoryReviewer.flush``: the LLM reviewer when the engine has a
chat client, the deterministic extractor otherwise) reads the rows not flushed yet and writes —
or stages, by the approval mode — what should be remembered (seeds 000 §3.2, 002).

Invariants:
- a flush never runs on the turn's path: it is queued on the engine's worker pool (inline only
  when the pool is already shut down, i.e. during ``Engine.close``);
- the *watermark* is durable: each flush appends a ``memory_flush`` event ``{"through_seq": N}``
  to the session (the ledger's own event log) after the review ran, and the next flush covers the
  active rows after it. A process that dies between the commit and the flush loses nothing: the
  checkpoint is the durable intent, and ``opened`` (run when a session is opened) flushes any
  compacted span the watermark has not reached. A crash between the review's writes and the
  event re-reviews that span once; the reviewer flags what is already stored (near-duplicates)
  instead of adding it again;
- a rotated child's carried rows (the parent's compacted view) are never re-reviewed: the
  parent is flushed to its end when it rotates;
- a runtime's end is the end of every session it held: a proxy runtime of a derived family
  moves between the branches of conversations that open alike (``SessionMirror.held``);
- flushes of one session are serialized in the process; a failing reviewer is logged, the
  watermark stays, and the next flush retries the span;
- a session whose runtime was dropped without ``close`` is flushed when the engine closes
  (``close``); one that dies with its process is flushed when it has been idle long enough
  (``flush_idle``: ``refold serve`` sweeps every few minutes, ``refold memory flush`` on demand),
  or at its next compaction or end. Across processes the sweep takes a short lease per session,
  so two sweepers never review one span twice.
"""

from __future__ import annotations

import logging
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from refold.errors import StorageError
from refold.runtime.cost import paying_for
from refold.runtime.rotation import load_info
from refold.store.base import Store

if TYPE_CHECKING:
    from refold.runtime.memory_link import MemoryLink

log = logging.getLogger(__name__)

EVENT = "memory_flush"
SWEEP_LEASE_SECONDS = 300.0  # a sweeper that dies holding one blocks that session this long
LOCK_STRIPES = 64  # flushes of one session are serialized by one of this many locks
STORE_DOWN_SECONDS = 60.0  # after a flush found the store unreachable, none tried for this long


class MemoryFlush:
    """Flushes of one engine's sessions through its ``MemoryLink``'s reviewer."""

    def __init__(self, store: Store, link: MemoryLink, executor: ThreadPoolExecutor) -> None:
        self.store = store
        self.link = link
        self.executor = executor
        # striped, not one per session: a long-lived proxy sees a new session every request,
        # and a lock per session it ever flushed grew without bound (two sessions sharing a
        # stripe only wait for each other's background flush)
        self._locks = tuple(threading.Lock() for _ in range(LOCK_STRIPES))
        self._guard = threading.Lock()
        self._open: set[str] = set()  # sessions opened here whose end was not flushed yet
        self._store_down_until = 0.0  # (monotonic) no flush tried before this: see ``_run``

    # -- the triggers --------------------------------------------------------------------------
    def after_checkpoint(self, session_id: str, through_seq: int | None) -> None:
        """A checkpoint replaced rows up to ``through_seq`` (None: the session rotated away, so
        all of it): flush them in the background."""
        self._queue(session_id, through_seq, "compaction")

    def session_end(self, session_id: str) -> None:
        """The session's runtime closed: flush what is left."""
        with self._guard:
            self._open.discard(session_id)
        self._queue(session_id, None, "session_end")

    def opened(self, session_id: str) -> None:
        """A runtime opened ``session_id``: remember it for ``close``, and flush a checkpoint's
        span that was never flushed (the process that compacted it died)."""
        with self._guard:
            self._open.add(session_id)
        try:
            latest = self.store.latest_checkpoint(session_id)
            if latest is not None and latest.tail_start_seq - 1 > self.watermark(session_id):
                self._queue(session_id, latest.tail_start_seq - 1, "recovery")
        except Exception as exc:  # opening a session never fails for memory upkeep
            log.warning("session %s: memory flush recovery failed: %s", session_id,
                        exc.__class__.__name__)

    def held(self, session_id: str) -> None:
        """A runtime moved to ``session_id`` (a branch of its family, a rotation's child): it
        ends with that runtime (``session_end``) or, dropped without ``close``, with the engine
        (``close``); till then the idle sweep leaves it alone, as a session ``opened`` here. (A
        branch's copied checkpoint is its parent's span: no recovery flush for it.)"""
        with self._guard:
            self._open.add(session_id)

    def close(self) -> None:
        """The engine closes (its pool already drained): sessions whose runtime was dropped
        without ``close`` (the proxy evicts a runtime that is in use without closing it) end
        here, flushed in place."""
        with self._guard:
            pending, self._open = sorted(self._open), set()
        for session_id in pending:
            self._run(session_id, None, "session_end")

    def flush_idle(self, owner: str, idle_seconds: float, *, holder: str, limit: int = 200,
                   now: float | None = None) -> list[str]:
        """Flush, now, the sessions of ``owner`` (among the ``limit`` started last) whose
        unflushed rows end with a message older than ``idle_seconds``: their process died, or
        they were never closed. Sessions open in this engine are left to their own end. The ids
        flushed, oldest start first."""
        if not self.link.can_flush:
            return []
        cutoff = (time.time() if now is None else now) - max(0.0, idle_seconds)
        with self._guard:
            open_here = set(self._open)
        flushed: list[str] = []
        for session in reversed(self.store.list_sessions(limit=limit, owner=owner)):
            if session.id in open_here or session.message_count == 0:
                continue
            lease = f"memory-flush:{session.id}"
            if not self.store.acquire_lease(lease, holder, SWEEP_LEASE_SECONDS):
                continue  # another process is flushing it
            try:
                if self._idle_tail(session.id, cutoff) and \
                        self.flush(session.id, None, "idle") is not None:
                    flushed.append(session.id)
            except Exception as exc:  # one session's failure never stops the sweep
                log.warning("session %s: idle memory flush failed: %s", session.id,
                            exc.__class__.__name__)
            finally:
                self.store.release_lease(lease, holder)
        return flushed

    def _idle_tail(self, session_id: str, cutoff: float) -> bool:
        """Does the session end, before ``cutoff``, with active rows no flush read yet? One
        row read: the flush itself reads the span."""
        last = self.store.last_message(session_id)
        if last is None or last.created_at > cutoff:
            return False
        return last.seq > max(self.watermark(session_id), self._carried_end(session_id))

    # -- running one --------------------------------------------------------------------------
    def _queue(self, session_id: str, through_seq: int | None, reason: str) -> None:
        if not self.link.can_flush:
            return
        try:
            self.executor.submit(self._run, session_id, through_seq, reason)
        except RuntimeError:  # the pool is shut down (Engine.close): flush here, once
            self._run(session_id, through_seq, reason)

    def _run(self, session_id: str, through_seq: int | None, reason: str) -> None:
        if time.monotonic() < self._store_down_until:
            return  # left to a later idle sweep, which finds the session's unflushed rows
        try:
            self.flush(session_id, through_seq, reason)
        except Exception as exc:  # background upkeep never takes the process down
            log.warning("session %s: memory flush (%s) failed: %s", session_id, reason,
                        exc.__class__.__name__)
            if isinstance(exc, StorageError):
                # the store is unreachable (a database dropped, a server gone): the other
                # sessions' flushes would each wait out the pool's timeout (a serve with 80
                # sessions took minutes to stop); they wait for a later idle sweep instead
                self._store_down_until = time.monotonic() + STORE_DOWN_SECONDS
                log.warning("memory flushes paused for %.0f s: the store is unreachable",
                            STORE_DOWN_SECONDS)

    def flush(self, session_id: str, through_seq: int | None, reason: str) -> Any:
        """Review the unflushed active rows up to ``through_seq`` (None: to the end) now and
        advance the watermark. The reviewer's report, or None when there was nothing new."""
        with self._lock_of(session_id):
            start = max(self.watermark(session_id), self._carried_end(session_id))
            rows = self.store.get_messages(session_id, start_seq=start + 1, end_seq=through_seq)
            if not rows:
                return None
            with paying_for(session_id):  # an LLM reviewer's usage is this session's cost
                report = self.link.flush([r.message for r in rows])
            if report is None:
                return None
            self.store.append_event(session_id, EVENT, {
                "through_seq": rows[-1].seq, "reason": reason, "mode": report.mode,
                "saved": len(report.saved), "staged": len(report.staged),
                "duplicates": len(report.duplicates), "refused": len(report.refused),
                # why (the limit, the scan's reason; never the text, which may be the secret)
                **({"reasons": list(report.reasons)} if getattr(report, "reasons", None)
                   else {})})
            log.info("session %s: memory flush (%s) through seq %d: %d saved, %d staged",
                     session_id, reason, rows[-1].seq, len(report.saved), len(report.staged))
            return report

    def watermark(self, session_id: str) -> int:
        """The last seq a flush covered (0: none yet)."""
        seqs = [int(e.payload.get("through_seq") or 0)
                for e in self.store.list_events(session_id, EVENT)]
        return max(seqs, default=0)

    def _carried_end(self, session_id: str) -> int:
        info = load_info(self.store, session_id)
        if info is None or info.carried <= 0:
            return 0
        carried = self.store.get_messages(session_id, include_inactive=True, limit=info.carried)
        return carried[-1].seq if carried else 0

    def _lock_of(self, session_id: str) -> threading.Lock:
        return self._locks[zlib.crc32(session_id.encode("utf-8", "surrogatepass")) % LOCK_STRIPES]
