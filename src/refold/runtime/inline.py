"""``InlineTurns``: the proxy's inline fast path of one ``SessionRuntime``.

The proxy runs on an event loop. A turn that only extends the session it knows — the re-sent
history starts with the chain this runtime last stored, its new messages are not heavy
(``INLINE_NEW_CHARS``), the context is under the pre-compaction mark, the store commits without
fsync (``commits_are_quick``) and is free right now — is small, bounded work, cheaper than a
hop to a worker thread. ``InlineTurns`` does such
turns on the caller's thread and never waits: where a turn needs more (a changed history, a
compaction, a full projection read) or something is busy, it does nothing and answers None /
False — the caller then uses the runtime's ordinary API in a worker thread (``busy`` says the
answer was "busy", not "needs a worker": the proxy tries again a moment later first). Nothing is stored
twice: the ordinary call finds whatever the inline one stored.

The deferred store (``prepare(history, defer_store=True)``): on the known fast path the request
is built from the cached view first, as if the new messages were stored, and ``pending`` is
True; ``store_pending()`` (inline) or ``settle()`` (worker thread) stores them once the request
went upstream, so the write overlaps the model's work, and says whether what was sent is
exactly what the stored ledger gives (False: another writer moved the session — redo the turn).

``record(..., hold_after_turn=True)`` stores the reply and holds memory's after-turn work until
``SessionRuntime.finish_turn()``, so the caller can acknowledge the reply first.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from refold._records import dataclass
from refold.errors import Conflict, InvalidInput, WouldBlock
from refold.messages.model import Message
from refold.runtime.chain import KnownChain
from refold.runtime.prepared import Prepared
from refold.runtime.view import ViewCache
from refold.store.base import StoredMessage

if TYPE_CHECKING:
    from refold.runtime.session import SessionRuntime

_T = TypeVar("_T")


class NeedsWorker(Exception):
    """Inline: this turn needs work that must not run on an event loop."""


INLINE_NEW_CHARS = 64 * 1024
"""New messages, or a reply, heavier than this (characters of their strings) are counted,
hashed and stored from a worker thread, not on the event loop: the tokenizer, ``sha256`` and SQLite let go of
the GIL while they work on a big tool output, so the loop serves other requests meanwhile.
(Work on what the runtime knows already — comparing a long re-sent history, copying the view —
holds the GIL wherever it runs: a thread would only add its hops.)"""


def too_heavy_inline(messages: list[Message]) -> bool:
    """Do ``messages`` hold more than ``INLINE_NEW_CHARS`` characters of strings?"""
    budget = INLINE_NEW_CHARS
    stack: list[Any] = list(messages)
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            budget -= len(value)
            if budget < 0:
                return True
        elif isinstance(value, dict):
            stack += value.values()
        elif isinstance(value, list):
            stack += value
    return False


@dataclass
class PendingStore:
    """What ``prepare(defer_store=True)`` sent but did not store yet."""

    chain: KnownChain  # the chain before: ``expect_last`` is its tip
    view: ViewCache  # extended with ``count`` provisional rows
    suffix: list[Message]
    counts: list[int | None]
    count: int


class InlineTurns:
    """Bounded, never-waiting turns of ``runtime`` for an event loop (see the module doc)."""

    def __init__(self, runtime: SessionRuntime) -> None:
        self._rt = runtime
        self.pending: PendingStore | None = None
        self.held_after_turn: int | None = None  # tool iterations of a held after-turn
        # the last call answered None / False because another thread held the runtime or the
        # store (not because the turn needs a worker): trying again a moment later may work
        self.busy = False

    # -- the turn ----------------------------------------------------------------------------
    def prepare(self, history: list[Message], *, tools: list[dict[str, Any]] | None = None,
                defer_store: bool = False) -> Prepared | None:
        """``SessionRuntime.prepare_history`` when it can run inline; None: call that."""
        if not isinstance(history, list):
            raise InvalidInput("history must be a list of chat messages")
        rt = self._rt
        rt.finish_turn()
        return self._run(lambda: rt._prepare_history_locked(history, tools, True, defer_store))

    def record(self, response: Message, *, usage: dict[str, Any] | None = None,
               model: str | None = None, hold_after_turn: bool = False) -> bool:
        """``SessionRuntime.record`` inline. True when recorded; False when nothing was stored
        because the reply needs the worker path (a compaction may follow it, or the store is
        busy)."""
        rt = self._rt
        message = rt._checked_reply(response)
        usage = rt._checked_usage(usage)
        rt.finish_turn()
        outcome = self._run(lambda: rt._record_locked(message, usage, model, True))
        if outcome is None:
            return False
        turn_done, iterations = outcome
        if turn_done and hold_after_turn:
            self.held_after_turn = iterations
        elif turn_done:
            self.after_turn(iterations)
        return True

    # -- the deferred store ------------------------------------------------------------------
    @property
    def has_pending(self) -> bool:
        """True while messages a ``prepare(defer_store=True)`` sent are not stored."""
        return self.pending is not None

    def store_pending(self) -> bool | None:
        """Store the deferred messages inline: as ``settle``, or None when the store or the
        runtime is busy (call ``settle`` in a worker thread)."""
        return self._run(self.flush)

    def settle(self) -> bool:
        """Store the messages the last ``prepare(defer_store=True)`` deferred. True: stored,
        and the request built from them is exactly what the ledger now gives. False: another
        writer moved the session (they are not stored, or stored after other rows) — the caller
        discards that request and prepares the turn again. Nothing pending: True."""
        with self._rt._lock:
            return self.flush()

    def defer_known_suffix(self, history: list[Message]) -> bool:
        """The deferred fast path: ``history`` is the known chain plus new messages, and the
        cached view ends on the chain's tip. The view is extended with provisional rows (the
        seqs they should get; no identity yet) and ``pending`` remembers what to store. False:
        nothing changed (take the normal path)."""
        rt = self._rt
        mirror = rt.mirror
        view = mirror.view
        if view is None or view.session_id != mirror.session_id or view.last_seq is None:
            return False
        found = mirror.known_suffix(history, rt.ops.validate)
        if found is None:
            return False
        chain, lead, suffix = found
        if not suffix or view.tip != chain.tip:
            return False  # nothing new, or the view does not end where the chain does
        rt.new_messages_fit(suffix)
        if rt._system_of(lead) != rt._system_prompt:
            return False  # a new system prompt is an event to store first
        counts = rt.ops.message_counts(suffix)
        provisional = [StoredMessage(mirror.session_id, view.last_seq + 1 + index, message, "",
                                     count, 0.0, True)
                       for index, (message, count) in enumerate(zip(suffix, counts, strict=True))]
        if any(row.seq in view.overrides for row in provisional) \
                or not view.extend(provisional, rt.ops.base_count):
            mirror.view = None  # (cannot happen for rows after the tip; never keep a doubt)
            return False
        self.pending = PendingStore(chain, view, suffix, counts, len(provisional))
        mirror.confirmed = view  # provisionally: the store checks it against the ledger
        rt._count_turns(suffix)
        return True

    def flush(self) -> bool:
        """Store what is pending (caller holds the runtime's lock); see ``settle``."""
        pending = self.pending
        if pending is None:
            return True
        mirror = self._rt.mirror
        view = pending.view
        try:
            result = mirror.store.append_messages(mirror.session_id, pending.suffix,
                                                  token_counts=pending.counts,
                                                  expect_last=pending.chain.tip)
        except WouldBlock:
            raise  # still pending: the caller tries again from a worker thread
        except Conflict:  # another writer moved the session: nothing stored, the request void
            self.pending = None
            mirror.forget()
            return False
        except BaseException:  # a failure: nothing stored; the next turn syncs from the ledger
            self.pending = None
            mirror.forget()
            raise
        self.pending = None
        rows = result.appended
        mirror.chain = pending.chain.extended(pending.suffix, rows[-1].identity)
        tip = result.tip
        exact = tip is not None and tip.checkpoint_id == view.checkpoint_id \
            and not any(row.seq in view.overrides for row in rows)
        if exact and mirror.view is view and [r.seq for r in rows] == [
                r.seq for r in view.rows[-pending.count:]]:
            view.rows[-pending.count:] = rows
            view.tip = rows[-1].identity
            mirror.confirmed = view if tip is not None and view.current(tip) else None
            mirror.mark_confirmed()
        else:  # rows landed after a rewound stretch (other seqs), or the request is void
            mirror.view = mirror.confirmed = None
        return exact

    # -- after-turn work ---------------------------------------------------------------------
    def take_held(self) -> int | None:
        iterations, self.held_after_turn = self.held_after_turn, None
        return iterations

    def after_turn(self, iterations: int) -> None:
        """Memory's after-turn work without waiting: its rows usually come from the view; when
        they must be read and the store is busy, a short-lived thread does it instead."""
        rt = self._rt
        try:
            with rt.store.nonblocking():  # type: ignore[attr-defined]
                rt._host.after_turn(rt, iterations)
        except WouldBlock:
            threading.Thread(target=rt._host.after_turn, args=(rt, iterations),
                             name="refold-after-turn", daemon=True).start()

    def _run(self, call: Callable[[], _T]) -> _T | None:
        """``call()`` under the runtime's lock with the store in non-blocking mode; None when
        it cannot run that way."""
        rt = self._rt
        self.busy = False
        nonblocking = getattr(rt.store, "nonblocking", None)
        if nonblocking is None or not getattr(rt.store, "commits_are_quick", False):
            return None
        if not rt._lock.acquire(blocking=False):
            self.busy = True
            return None
        try:
            with nonblocking():
                return call()
        except NeedsWorker:
            return None
        except WouldBlock:
            self.busy = True
            return None
        finally:
            rt._lock.release()
