"""``SessionRuntime``: one session's turn loop — prepare what to send, record what came back.

Per turn the caller does ``prepare`` (library: new messages; proxy: ``prepare_history`` with the
whole re-sent history), calls its model, then ``record`` the reply. In between refold keeps:

- the ledger: every message stored once (``append_messages`` / ``sync_messages``); nothing is
  ever rewritten — compaction appends a checkpoint and the projection serves the compacted view;
- the system prompt: the caller's system prompt + the memory snapshot block rendered once when
  the session was opened, byte-identical all session (provider prompt caches stay warm);
- the budget: preflight compaction when the estimate crosses the trigger (never on a rough
  estimate while a real reading is pending), post-response compaction on the provider's real
  usage, compact-and-retry on context overflow (``handle_error``);
- background pre-compaction: from a pre-threshold on, the next checkpoint is computed on a worker
  thread so the crossing turn only swaps it in;
- the projection it last read or wrote (``refold.runtime.view``), with a running token sum: a
  turn that follows its own writes costs O(new messages) — one small ``view_tip`` query instead
  of re-reading and re-counting the projection; anything else falls back to the full read.

- the proxy's deferred store (``prepare_history(light=True, defer_store=True)``): on the known
  fast path the request is built first and the new messages are stored by ``store_pending``
  once the request went upstream, so the write overlaps the model's work; ``store_pending``
  says whether what was sent is exactly what the stored ledger gives (else: redo the turn).

A ``SessionRuntime`` serializes its own turns with a lock; it is safe to share between threads.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from refold.errors import (
    Conflict,
    InvalidInput,
    MessageValidationError,
    RefoldError,
    UpstreamError,
    WouldBlock,
)
from refold.messages.model import Message, content_text, wire_form
from refold.runtime.chain import KnownChain
from refold.runtime.precompact import Plan, Precompactor
from refold.runtime.prepared import Prepared
from refold.runtime.recall import with_recall
from refold.runtime.rotation import Rotation, record_rotation
from refold.runtime.view import ViewCache, detached
from refold.store.base import Projection, Store, StoredMessage, Usage, ViewTip

if TYPE_CHECKING:
    from refold.runtime.context import ContextOps
    from refold.runtime.engine import Engine

log = logging.getLogger(__name__)
_T = TypeVar("_T")

MAX_OVERFLOW_ATTEMPTS = 4


def split_system(history: Sequence[Message]) -> tuple[str | None, list[Message]]:
    """The client's leading system/developer message text and the conversation after it."""
    system_parts: list[str] = []
    index = 0
    while index < len(history) and history[index].get("role") in ("system", "developer"):
        system_parts.append(content_text(history[index]))
        index += 1
    system = "\n\n".join(p for p in system_parts if p) if system_parts else None
    return system, [dict(m) for m in history[index:]]


class SessionRuntime:
    """The per-session engine. Create through ``Engine.open_session``."""

    def __init__(self, engine: Engine, session_id: str, *, snapshot: str) -> None:
        self._engine = engine
        self.session_id = session_id
        self._snapshot = snapshot  # frozen for the life of this runtime
        from refold.compaction.session import recorded_system_prompt  # lazy, as in ContextOps

        # the caller's system prompt: a resumed session starts with the one it recorded
        self._system_prompt: str | None = recorded_system_prompt(engine.store, session_id)
        self._tools: list[dict[str, Any]] | None = None
        self._lock = threading.RLock()
        self._precompactor = Precompactor(engine.executor)
        self._trigger = engine.ops.new_trigger()
        self._last_sent_tokens: int | None = None  # estimate of the last prepared request
        self._last_prepared: Prepared | None = None
        self._chain: KnownChain | None = None  # the stored chain as of our last write (proxy)
        self._view: ViewCache | None = None  # the projection as of our last read/write
        # the view, when this turn's own append (expect_last) saw the store end exactly where
        # it does: current without a ``view_tip`` read; reset at every turn's start
        self._confirmed: ViewCache | None = None
        self._last_base_estimate: int | None = None  # uncalibrated estimate of that request
        self.view_reads = 0  # full projection reads for a turn (the rest reused ``_view``)
        self.last_reply: tuple[str, int] | None = None  # (session id, seq) of the last record
        self.user_turns = 0
        self.tool_iterations = 0
        self._turn_tool_iterations = 0
        self._recall = ""  # this user turn's recalled-memory block (see refold.runtime.recall)
        self._rotation = Rotation()  # maps a re-sent history onto a compaction child
        self._deferred_after_turn: int | None = None  # see record(defer_after_turn=True)
        self._pending: _PendingStore | None = None  # see prepare_history(defer_store=True)
        self._refs = engine.reference_link()  # @file/@session expansion (None: off)
        self._show_once = ""  # a note for the next user turn only (the resumed task state)
        self._closed = False

    # -- properties ------------------------------------------------------------------------
    @property
    def store(self) -> Store:
        return self._engine.store

    @property
    def ops(self) -> ContextOps:
        return self._engine.ops

    @property
    def memory_snapshot(self) -> str:
        """The frozen memory block injected into the system prompt (empty if no memory)."""
        return self._snapshot

    @property
    def precompactor(self) -> Precompactor:
        return self._precompactor

    def system_text(self, caller_prompt: str | None = None) -> str | None:
        """The system prompt sent: the caller's prompt, then the frozen memory snapshot."""
        prompt = caller_prompt if caller_prompt is not None else self._system_prompt
        parts = [p for p in (prompt, self._snapshot) if p]
        return "\n\n".join(parts) if parts else None

    # -- the turn ----------------------------------------------------------------------------
    def prepare(self, new_messages: list[Message], *, system_prompt: str | None = None,
                tools: list[dict[str, Any]] | None = None) -> Prepared:
        """Store ``new_messages`` and return the messages to send (compacting first if needed)."""
        if not isinstance(new_messages, list):
            raise InvalidInput("new_messages must be a list of chat messages")
        self.finish_turn()
        with self._lock:
            self._flush_pending()
            self._confirmed = None
            if system_prompt is not None:
                self._note_system_prompt(system_prompt)  # kept for resume and `refold context`
                self._system_prompt = system_prompt
            if tools is not None:
                self._tools = tools
            clean = [wire_form(m) for m in self.ops.validate(new_messages)]
            if clean:
                self._chain = None  # library mode does not track the chain
                counts = self.ops.message_counts(clean)
                self._append_after_view(clean, counts)
                self._count_turns(clean)
            return self._prepare_locked()

    def prepare_history(self, history: list[Message], *,
                        tools: list[dict[str, Any]] | None = None,
                        light: bool = False, defer_store: bool = False) -> Prepared | None:
        """Proxy mode: sync the client's whole history (no duplicates), return what to send.

        ``light=True`` (the proxy, on its event loop): do only small, bounded work and never
        wait — the known-history fast path, a context under the pre-compaction mark, a store
        whose commits do not fsync (``commits_are_quick``) and is free right now. Where the
        turn needs more (a changed history, a compaction, a full projection read) or something
        is busy, it returns None: call again without ``light`` in a worker thread. Nothing is
        stored twice; the second call finds the new messages already stored.

        ``defer_store`` (with ``light``; the proxy): on the fast path the new messages are not
        stored yet when this returns — the request is built from the cached view as if they
        were — and ``pending_store`` is True. Call ``store_pending()`` once the request went
        upstream (before any of the reply reaches the client)."""
        if not isinstance(history, list):
            raise InvalidInput("history must be a list of chat messages")
        self.finish_turn()
        if light:
            return self._light(
                lambda: self._prepare_history_locked(history, tools, True, defer_store))
        with self._lock:
            return self._prepare_history_locked(history, tools, False)

    @property
    def pending_store(self) -> bool:
        """True while messages a ``prepare_history(defer_store=True)`` sent are not stored."""
        return self._pending is not None

    def store_pending(self, *, light: bool = False) -> bool | None:
        """Store the messages the last ``prepare_history(defer_store=True)`` deferred. True: they
        are stored and the request built from them is exactly what the ledger now gives. False:
        they are stored (or another writer moved the session and they are not), but the request
        may differ — another writer changed the session — so the caller discards that request
        and prepares the turn again (which syncs whatever is missing). With ``light``: None when
        the store or the runtime is busy — call again without ``light`` in a worker thread.
        Nothing pending: True."""
        if light:
            return self._light(self._store_pending)
        with self._lock:
            return self._store_pending()

    def _flush_pending(self) -> None:
        """A deferred store nobody settled (the caller went another way): store it now; the
        turn that follows syncs from the ledger either way."""
        if self._pending is not None:
            self._store_pending()

    def _prepare_history_locked(self, history: list[Message],
                                tools: list[dict[str, Any]] | None, light: bool,
                                defer: bool = False) -> Prepared:
        self._flush_pending()
        self._confirmed = None
        if tools is not None:
            self._tools = tools
        history = self._rotation.translate(self.store, self.session_id, history)
        if light and defer and self._defer_known_suffix(history):
            try:
                return self._prepare_locked(light)
            except BaseException:
                # the worker path takes over (or the turn fails): store now, as without defer
                self._store_pending()
                raise
        if not self._sync_known_prefix(history):
            if light:
                raise _NeedsWorker
            self._sync_history(history)
        return self._prepare_locked(light)

    def _light(self, call: Callable[[], _T]) -> _T | None:
        """``call()`` under this runtime's lock with the store in non-blocking mode; None when
        it cannot run that way (see ``prepare_history``)."""
        nonblocking = getattr(self.store, "nonblocking", None)
        if nonblocking is None or not getattr(self.store, "commits_are_quick", False):
            return None
        if not self._lock.acquire(blocking=False):
            return None
        try:
            with nonblocking():
                return call()
        except (_NeedsWorker, WouldBlock):
            return None
        finally:
            self._lock.release()

    def _sync_history(self, history: list[Message]) -> None:
        """The full path: validate, count and hash the whole history; the store finds what is
        new (rewinding a divergent tail)."""
        self._chain = None
        self._view = None  # the store may rewind: read the projection afresh
        valid = [wire_form(m) for m in self.ops.validate(history)]
        system, conversation = split_system(valid)
        self._note_system_prompt(system)
        self._system_prompt = system
        if conversation:
            counts = self.ops.message_counts(conversation)
            result = self.store.sync_messages(self.session_id, conversation,
                                              token_counts=counts)
            self._count_turns([s.message for s in result.appended])
            if result.rewound:
                self._precompactor.discard()
            if result.appended:  # the stored active chain is now exactly ``conversation``
                self._chain = KnownChain.of(self.session_id, conversation,
                                            result.appended[-1].identity)

    def _known_suffix(self, history: list[Message]
                      ) -> tuple[KnownChain, str | None, list[Message]] | None:
        """``history`` as the chain this runtime last stored plus new messages: (the chain, the
        history's system prompt, the new messages validated, in wire form). None when the chain
        is unknown or ``history`` does not start with it, or a new message is invalid (the full
        path reports that, with the message's real index)."""
        chain = self._chain
        if chain is None or chain.session_id != self.session_id:
            return None
        leading = 0
        while leading < len(history) and isinstance(history[leading], dict) \
                and history[leading].get("role") in ("system", "developer"):
            leading += 1
        known = chain.known_prefix(history[leading:])
        if known is None:
            return None
        try:
            valid = [wire_form(m) for m in
                     self.ops.validate(history[:leading] + history[leading + known:])]
        except MessageValidationError:
            return None
        system, _ = split_system(valid[:leading])
        return chain, system, valid[leading:]

    def _sync_known_prefix(self, history: list[Message]) -> bool:
        """The fast path (see ``refold.runtime.chain``): when ``history`` starts with the chain
        this runtime last stored, only the new suffix is validated, counted, hashed and
        appended — after the stored tip, checked in the write transaction. False: use the full
        path (nothing was stored)."""
        found = self._known_suffix(history)
        if found is None:
            return False
        chain, system, suffix = found
        counts = self.ops.message_counts(suffix)
        try:
            result = self.store.append_messages(self.session_id, suffix, token_counts=counts,
                                                expect_last=chain.tip)
        except Conflict:  # another writer moved the session: sync everything
            self._chain = None
            self._view = None
            return False
        self._extend_view(result.appended, chain.tip, result.tip)
        tip = result.appended[-1].identity if result.appended else chain.tip
        self._chain = chain.extended(suffix, tip)
        self._count_turns([s.message for s in result.appended])
        # last: if it must wait (light mode), a second call finds the rows stored and redoes it
        self._note_system_prompt(system)
        self._system_prompt = system
        return True

    def _defer_known_suffix(self, history: list[Message]) -> bool:
        """The deferred fast path: ``history`` is the known chain plus new messages, and the
        cached view ends on the chain's tip. The view is extended with provisional rows (the
        seqs they should get; no identity yet) and ``_pending`` remembers what to store. False:
        nothing changed (take the normal path)."""
        view = self._view
        if view is None or view.session_id != self.session_id or view.last_seq is None:
            return False
        found = self._known_suffix(history)
        if found is None:
            return False
        chain, system, suffix = found
        if not suffix or view.tip != chain.tip:
            return False  # nothing new, or the view does not end where the chain does
        if system != self._system_prompt:
            return False  # a new system prompt is an event to store first
        counts = self.ops.message_counts(suffix)
        provisional = [StoredMessage(self.session_id, view.last_seq + 1 + index, message, "",
                                     count, 0.0, True)
                       for index, (message, count) in enumerate(zip(suffix, counts, strict=True))]
        if any(row.seq in view.overrides for row in provisional) \
                or not view.extend(provisional, self.ops.base_count):
            self._view = None  # (cannot happen for rows after the tip; never keep a doubt)
            return False
        self._pending = _PendingStore(chain, view, suffix, counts, len(provisional))
        self._confirmed = view  # provisionally: store_pending checks it against the ledger
        self._count_turns(suffix)
        return True

    def _store_pending(self) -> bool:
        pending = self._pending
        if pending is None:
            return True
        view = pending.view
        try:
            result = self.store.append_messages(self.session_id, pending.suffix,
                                                token_counts=pending.counts,
                                                expect_last=pending.chain.tip)
        except WouldBlock:
            raise  # still pending: the caller tries again from a worker thread
        except Conflict:  # another writer moved the session: nothing stored, the request void
            self._pending = None
            self._chain = self._view = self._confirmed = None
            return False
        except BaseException:  # a failure: nothing stored; the next turn syncs from the ledger
            self._pending = None
            self._chain = self._view = self._confirmed = None
            raise
        self._pending = None
        rows = result.appended
        self._chain = pending.chain.extended(pending.suffix, rows[-1].identity)
        tip = result.tip
        exact = tip is not None and tip.checkpoint_id == view.checkpoint_id \
            and not any(row.seq in view.overrides for row in rows)
        if exact and self._view is view and [r.seq for r in rows] == [
                r.seq for r in view.rows[-pending.count:]]:
            view.rows[-pending.count:] = rows
            view.tip = rows[-1].identity
            self._confirmed = view if tip is not None and view.current(tip) else None
        else:  # rows landed after a rewound stretch (other seqs), or the request is void
            self._view = self._confirmed = None
        return exact

    def record(self, response: Message, *, usage: dict[str, Any] | None = None,
               model: str | None = None, light: bool = False,
               defer_after_turn: bool = False) -> bool:
        """Store the assistant reply, account usage, apply the post-response policy. True when
        recorded; with ``light`` (see ``prepare_history``) False when nothing was stored because
        the reply needs the worker path (a compaction may follow it, or the store is busy).

        ``defer_after_turn`` (with ``light``; the proxy): memory's after-turn work (provider
        sync, review counting) is held until ``finish_turn()``, so the caller can acknowledge
        the reply first. The next ``prepare``/``record`` runs it if the caller did not."""
        if not isinstance(response, dict):
            raise InvalidInput("response must be an assistant message (a dict)")
        message = _normalize_reply(response)
        self.ops.validate([message])
        self.finish_turn()
        if light:
            outcome = self._light(lambda: self._record_locked(message, usage, model, True))
            if outcome is None:
                return False
        else:
            with self._lock:
                outcome = self._record_locked(message, usage, model, False)
        turn_done, iterations = outcome
        if turn_done and light and defer_after_turn:
            self._deferred_after_turn = iterations
        elif turn_done and light:
            self._after_turn_light(iterations)
        elif turn_done:
            self._engine.after_turn(self, iterations)
        return True

    def finish_turn(self, *, wait: bool = False) -> None:
        """Run the after-turn work a ``record(defer_after_turn=True)`` held back, if any. It
        never waits for the store (a busy store hands it to a short-lived thread) unless
        ``wait`` (closing: done before this returns)."""
        iterations, self._deferred_after_turn = self._deferred_after_turn, None
        if iterations is None:
            return
        if wait:
            self._engine.after_turn(self, iterations)
        else:
            self._after_turn_light(iterations)

    def _after_turn_light(self, iterations: int) -> None:
        """Memory's after-turn work without waiting: its rows usually come from the view; when
        they must be read and the store is busy, a short-lived thread does it instead."""
        try:
            with self.store.nonblocking():  # type: ignore[attr-defined]
                self._engine.after_turn(self, iterations)
        except WouldBlock:
            threading.Thread(target=self._engine.after_turn, args=(self, iterations),
                             name="refold-after-turn", daemon=True).start()

    def _record_locked(self, message: Message, usage: dict[str, Any] | None,
                       model: str | None, light: bool) -> tuple[bool, int]:
        self._flush_pending()
        counts = self.ops.message_counts([message])
        usage = usage or {}
        prompt_tokens = _int(usage.get("prompt_tokens"))
        completion = _int(usage.get("completion_tokens"))
        cached = _int((usage.get("prompt_tokens_details") or {}).get("cached_tokens")
                      if isinstance(usage.get("prompt_tokens_details"), dict) else 0)
        if light and prompt_tokens >= self._light_limit():
            raise _NeedsWorker  # the post-response policy may compact: nothing stored yet
        # the totals move in the reply's own transaction (one commit per record)
        delta = Usage(prompt_tokens, completion, cached, model=model) \
            if prompt_tokens or completion else None
        self._append_reply(message, counts, delta)
        if prompt_tokens and self._last_base_estimate is not None:
            self.ops.observe_estimate(self._last_base_estimate, prompt_tokens)
        turn_done = not message.get("tool_calls")
        if not turn_done:
            self.tool_iterations += 1
            self._turn_tool_iterations += 1
        self._post_response(prompt_tokens or None)
        iterations, self._turn_tool_iterations = self._turn_tool_iterations, (
            0 if turn_done else self._turn_tool_iterations)
        return turn_done, iterations

    def _light_limit(self) -> int:
        """Tokens from which a turn may compact or start a background pre-compaction."""
        return min(self.ops.threshold, self.ops.pre_threshold)

    def handle_error(self, error: UpstreamError, attempt: int) -> bool:
        """True when the context was compacted further so a retry can succeed."""
        with self._lock:
            self._flush_pending()
            self._trigger.note_no_reading()
            if error.kind != "overflow" or attempt >= MAX_OVERFLOW_ATTEMPTS:
                return False
            projection = self.store.projection(self.session_id)
            before = self._measure(projection)
            target = self._trigger.overflow_target(attempt, self._last_sent_tokens or before)
            if target is None:
                return False
            self._precompactor.discard()
            report = self._compact_now(projection, target_tokens=target)
            if report is None:
                return False
            after = self._measure(self.store.projection(self.session_id))
            self._last_sent_tokens = after
            return after < before

    def compact(self, *, force: bool = True) -> Any:
        """Compact now (``/compact``); the report, or None when nothing was done. Without
        ``force`` only when the context is over the threshold."""
        with self._lock:
            self._flush_pending()
            projection = self.store.projection(self.session_id)
            if not force and self._measure(projection) < self.ops.threshold:
                return None
            self._precompactor.discard()
            return self._compact_now(projection, target_tokens=None)

    # -- inspection --------------------------------------------------------------------------
    def context_breakdown(self) -> dict[str, Any]:
        """Tokens by part (system, memory, summary, tail by role, tool outputs, tool schemas)."""
        with self._lock:
            projection = self.store.projection(self.session_id)
            parts = self.ops.breakdown(projection, system_prompt=self._system_prompt,
                                       snapshot=self._snapshot, tools=self._tools,
                                       trigger=self._trigger)
            parts["session_id"] = self.session_id
            return parts

    def close(self) -> None:
        """Done with this runtime (the session stays resumable): memory providers get
        ``on_session_end``, once. The proxy calls it on eviction; ``Engine.close`` for the rest."""
        self.finish_turn(wait=True)
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                self._flush_pending()  # a deferred store nobody settled (the proxy always does)
            except RefoldError as exc:  # the client still holds them and re-sends them
                log.warning("session %s: storing deferred messages at close failed: %s",
                            self.session_id, exc)
        self._engine.session_closed(self)

    # -- internals -----------------------------------------------------------------------------
    def _append_reply(self, message: Message, counts: list[int | None],
                      usage: Usage | None = None) -> None:
        """Append the reply (and its usage); keep the known chain only if it still ends where
        we think."""
        chain, self._chain = self._chain, None
        result = None
        if chain is not None and chain.session_id == self.session_id:
            try:
                result = self.store.append_messages(self.session_id, [message],
                                                    token_counts=counts, expect_last=chain.tip,
                                                    usage=usage)
            except Conflict:  # someone else wrote: append where it ends now
                pass
            except BaseException:
                self._chain = chain  # nothing was stored (busy, say): what we knew still holds
                raise
            else:
                self._chain = chain.extended([message], result.appended[-1].identity)
                self._extend_view(result.appended, chain.tip, result.tip)
        if result is None:
            result = self._append_after_view([message], counts, usage)
        self.last_reply = (self.session_id, result.appended[-1].seq)

    def _append_after_view(self, messages: list[Message], counts: list[int | None],
                           usage: Usage | None = None) -> Any:
        """Append after the cached view's tip (so the view can be extended), or, when that is
        unknown or another writer moved it, wherever the session ends now (view dropped)."""
        view = self._view
        if view is not None and view.session_id == self.session_id and view.tip is not None:
            with contextlib.suppress(Conflict):
                result = self.store.append_messages(self.session_id, messages,
                                                    token_counts=counts, expect_last=view.tip,
                                                    usage=usage)
                self._extend_view(result.appended, view.tip, result.tip)
                return result
        self._view = None
        return self.store.append_messages(self.session_id, messages, token_counts=counts,
                                          usage=usage)

    def _extend_view(self, rows: list[StoredMessage], expected_tip: str,
                     store_tip: ViewTip | None = None) -> None:
        """Rows were appended with ``expect_last=expected_tip``: extend the view if it ended
        there, else drop it. ``store_tip`` (the append's ``AppendResult.tip``) equal to the
        extended view confirms it current for the rest of this turn."""
        view = self._view
        if view is None or view.session_id != self.session_id or view.tip != expected_tip \
                or not view.extend(rows, self.ops.base_count):
            self._view = self._confirmed = None
            return
        self._confirmed = view if store_tip is not None and view.current(store_tip) else None

    def recent_rows(self, count: int) -> list[Message] | None:
        """The last ``count`` active rows up to the reply just recorded, from this turn's
        confirmed view (copies); None when the view cannot answer (not confirmed this turn, or
        a checkpoint hides older rows it would need): read the store instead."""
        with self._lock:
            view = self._confirmed
            if view is None or view is not self._view or self.last_reply is None \
                    or self.last_reply != (self.session_id, view.last_seq):
                return None
            if len(view.rows) < count and view.checkpoint is not None:
                return None
            return [dict(row.message) for row in view.rows[-count:]]

    def _current_view(self) -> ViewCache:
        """The projection as a ``ViewCache``: the runtime's own when the store's tip says it is
        still current (one small query), else a full read (kept when consistent)."""
        view = self._view
        if view is not None and view is self._confirmed:
            return view  # this turn's own append saw the store end here (no read needed)
        tip = self.store.view_tip(self.session_id)
        if view is not None and view.session_id == self.session_id and view.current(tip):
            return view
        self.view_reads += 1
        projection = self.store.projection(self.session_id)
        fresh = ViewCache.of(projection, tip, self.ops.base_count)
        self._view = fresh if fresh.trusted else None  # a racing writer: use once, re-read next
        return fresh

    def _count_turns(self, messages: Sequence[Message]) -> None:
        for message in messages:
            if message.get("role") == "user":
                self.user_turns += 1
                if self._engine.memory is not None:
                    self._engine.memory.begin_turn()  # the memory tool's per-turn budget
        users = [m for m in messages if m.get("role") == "user"]
        if users:  # a new user turn: its recall block, fixed for the whole turn
            self._recall = self._engine.turn_recall(content_text(users[-1]))
            if self._show_once:  # placed like recall: this turn's user message, not stored
                self._recall = "\n\n".join(p for p in (self._show_once, self._recall) if p)
                self._show_once = ""

    def show_once(self, note: str) -> None:
        """Show ``note`` to the model with the next user turn (all its tool iterations), once."""
        self._show_once = note

    def _note_system_prompt(self, system: str | None) -> None:
        """Keep the client's system prompt in the ledger as an event when it changes."""
        if system is None or system == self._system_prompt:
            return
        events = self.store.list_events(self.session_id, "system_prompt")
        if events and events[-1].payload.get("text") == system:
            return
        self.store.append_event(self.session_id, "system_prompt", {"text": system})

    def _build(self, projection: Projection) -> list[Message]:
        return with_recall(self.ops.build(projection, self.system_text()), self._recall)

    def _measure(self, projection: Projection) -> int:
        return self.ops.count(self._build(projection), self._tools)

    def _request(self, view: ViewCache, light: bool = False) -> tuple[list[Message], int]:
        """The messages to send (fresh wire-form dicts) and the sum of their base counts: O(1)
        on top of the view's running sum (the system message, the user messages whose
        references are expanded (``refold.references.link``), the one recall extends)."""
        system = self.system_text()
        lead: list[Message] = [{"role": "system", "content": system}] if system else []
        body = view.tokens + sum(map(self.ops.base_count, lead))
        out = [detached(m) for m in lead] + view.copies()
        if self._refs is not None:
            body += self._refs.apply(self.session_id, out, view.rows, block=not light,
                                     count=self.ops.base_count)
        if self._recall:
            plain = list(out)
            messages = with_recall(plain, self._recall)
            for index in range(len(plain) - 1, -1, -1):
                if messages[index] is not plain[index]:
                    body += (self.ops.base_count(messages[index])
                             - self.ops.base_count(plain[index]))
                    out[index] = detached(messages[index])
                    break
        return out, body

    def _prepare_locked(self, light: bool = False) -> Prepared:
        warnings: list[str] = []
        if light and (self._view is None or self._view is not self._confirmed):
            raise _NeedsWorker  # the view may need a full read
        view = self._current_view()
        messages, body = self._request(view, light)
        tokens = self.ops.total_from_base(body, self._tools)
        if light and tokens >= self._light_limit():
            raise _NeedsWorker  # nothing decided yet: the worker call redoes it all
        report = None
        before = None
        if self._trigger.preflight(tokens):
            report = self._swap_or_compact(view.snapshot())
            if report is not None:
                before = tokens
                view = self._current_view()
                messages, body = self._request(view)
                tokens = self.ops.total_from_base(body, self._tools)
        warnings.extend(self._trigger.take_warnings())
        if self._refs is not None:
            warnings.extend(self._refs.take_warnings())
        if tokens > self.ops.context_length:
            warnings.append(f"context is {tokens} tokens, over the {self.ops.context_length} "
                            "token window; the provider may reject it")
        self._maybe_precompact(tokens, view)
        self._last_sent_tokens = tokens
        self._last_base_estimate = self.ops.base_request(body, self._tools)
        self._trigger.note_request_sent()
        prepared = Prepared(messages=messages, tokens=tokens,
                            threshold=self.ops.threshold,
                            context_length=self.ops.context_length, compaction=report,
                            warnings=warnings, tokens_before=before)
        self._last_prepared = prepared
        return prepared

    def _post_response(self, real_tokens: int | None) -> None:
        if real_tokens is None:
            self._trigger.note_no_reading()
            return
        if self._trigger.post_response(real_tokens):
            self._swap_or_compact(self._current_view().snapshot())
        elif real_tokens >= self.ops.pre_threshold:
            self._maybe_precompact(real_tokens)

    def _swap_or_compact(self, projection: Projection) -> Any:
        """Use the background plan if it is ready and still valid, else compact now."""
        plan = self._precompactor.take(wait=True) if self._precompactor.busy else None
        if plan is not None:
            report = self._commit(plan)
            if report is not None:
                self._precompactor.used += 1
                after = self._measure(self.store.projection(self.session_id))
                if after < self.ops.threshold:
                    return report
                projection = self.store.projection(self.session_id)
            else:
                self._precompactor.discarded += 1
        return self._compact_now(projection, target_tokens=None)

    def _commit(self, plan: Plan) -> Any:
        plan = self._with_provider_notes(plan, validate=True)
        self._view = None  # a checkpoint is coming: the next turn reads the projection
        report = self.ops.commit(self.store, self.session_id, plan, holder=self._engine.holder,
                                 trigger=self._trigger, validate=True)
        if report is None:
            log.info("session %s: background plan outdated, discarded", self.session_id)
        else:
            self._maybe_rotate()
        return report

    def _compact_now(self, projection: Projection, *, target_tokens: int | None) -> Any:
        plan = self._plan_now(projection, target_tokens)
        if plan is None:
            return None
        self._view = None  # a checkpoint is coming: the next turn reads the projection
        report = self.ops.commit(self.store, self.session_id, plan, holder=self._engine.holder,
                                 trigger=self._trigger)
        self._maybe_rotate()
        return report

    def _plan_now(self, projection: Projection, target_tokens: int | None) -> Plan | None:
        """A plan to commit now, with memory provider notes in its summary. With an external
        provider the rows are found by a builtin probe first (the cut does not depend on the
        summarizer), so the configured summarizer runs once, already given the notes."""
        memory = self._engine.memory
        system, tools = self.system_text(), self._tools

        def plan(notes: str = "", probe: bool = False) -> Plan | None:
            return self.ops.plan(projection, system, tools, trigger=self._trigger,
                                 target_tokens=target_tokens, provider_notes=notes,
                                 probe=probe)

        if memory is None or not memory.has_external:
            return plan()
        probe = plan(probe=True)
        if probe is None:  # the builtin would store nothing: ask the configured one (late hook)
            first = plan()
            return self._with_provider_notes(first) if first is not None else None
        notes = self._engine.pre_compress(self.session_id, probe)
        final = probe if not notes and self.ops.summarizes_builtin else plan(notes)
        if final is not None and final.summarized != probe.summarized:
            log.info("session %s: the summarizer changed the cut after the memory hook",
                     self.session_id)
        return final

    def _with_provider_notes(self, plan: Plan, *, validate: bool = False) -> Plan:
        """A ready plan (the background one): memory providers see the rows ``plan`` replaces
        (``on_pre_compress``); when they return text, the plan is computed again from the same
        projection with those notes so the summary keeps them. The cut is the same
        (only the summary differs); if it is not, or the second plan fails, the first plan is
        used and the notes are dropped (logged) — a hook never stops a compaction."""
        notes = self._engine.pre_compress(self.session_id, plan, validate=validate)
        if not notes or plan.source is None:
            return plan
        noted = self.ops.plan(plan.source, self.system_text(), self._tools,
                              trigger=self._trigger, target_tokens=plan.target_tokens,
                              provider_notes=notes)
        if noted is None or noted.summarized != plan.summarized \
                or noted.base_checkpoint_id != plan.base_checkpoint_id:
            log.warning("session %s: memory provider notes not kept (the plan changed)",
                        self.session_id)
            return plan
        return noted

    def _maybe_rotate(self) -> None:
        """With ``rotate_on_compaction``, continue in a child session (Hermes' P-chain): it
        starts with the compacted view, the parent is ended; resume follows the chain."""
        if not self.ops.policy.rotate_on_compaction:
            return
        parent = self.store.get_session(self.session_id)
        carried = [wire_form(m) for m in self.ops.build(self.store.projection(parent.id), None)]
        title = self.store.next_lineage_title(parent.title) if parent.title else None
        child = self.store.create_session(title=title, source=parent.source, model=parent.model,
                                          parent_session_id=parent.id, link_kind="compaction",
                                          owner=parent.owner)
        self.store.append_messages(child.id, carried,
                                   token_counts=self.ops.message_counts(carried))
        record_rotation(self.store, parent.id, child.id, len(carried))  # for proxy clients
        self.store.end_session(parent.id, "compaction")
        log.info("session %s rotated to %s after compaction", parent.id, child.id)
        self._view = None
        self.session_id = child.id

    def _maybe_precompact(self, tokens: int, view: ViewCache | None = None) -> None:
        if not self._engine.background_precompact or self._precompactor.busy:
            return
        if tokens < self.ops.pre_threshold or not self._trigger.auto_allowed():
            return
        projection = (view or self._current_view()).snapshot()  # copies: the worker's own
        system = self.system_text()
        tools = self._tools

        trigger = self._trigger

        def plan_fn(snapshot: Projection) -> Plan | None:
            return self.ops.plan(snapshot, system, tools, trigger=trigger, target_tokens=None,
                                 speculative=True)

        self._precompactor.start(projection, plan_fn)


@dataclass
class _PendingStore:
    """What ``prepare_history(defer_store=True)`` sent but did not store yet."""

    chain: KnownChain  # the chain before: ``expect_last`` is its tip
    view: ViewCache  # extended with ``count`` provisional rows
    suffix: list[Message]
    counts: list[int | None]
    count: int


class _NeedsWorker(Exception):
    """Light mode: this turn needs work that must not run on an event loop."""


def _normalize_reply(response: Message) -> Message:
    """The reply as stored: wire form, role assistant by default; an empty reply (no content,
    no tool calls — some providers send one) is kept as empty text rather than refused."""
    message = wire_form({"role": "assistant", **response})
    if not message.get("tool_calls"):
        message.pop("tool_calls", None)
        if message.get("content") is None and not message.get("reasoning_content"):
            message["content"] = ""
    return message


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and value > 0 else 0
