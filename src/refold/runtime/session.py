"""``SessionRuntime``: one session's turn loop — prepare what to send, record what came back.

Per turn the caller does ``prepare`` (library: new messages; proxy: ``prepare_history`` with the
whole re-sent history), calls its model, then ``record`` the reply. The runtime is the turn API;
it coordinates parts that each own their state:

- ``mirror`` (``refold.runtime.mirror.SessionMirror``): the stored session as last read or
  written — the known chain and the cached projection with its running token sum — so a turn
  that follows its own writes costs O(new messages); every message write goes through it;
- ``checkpointer`` (``refold.runtime.checkpointer.Checkpointer``): when and how to compact —
  preflight on the estimate, post-response on the provider's real usage, compact-and-retry on
  context overflow (``handle_error``), background pre-compaction, rotation, and the breakdown
  of what fills the window;
- ``inline`` (``refold.runtime.inline.InlineTurns``): the proxy's fast path on its event loop
  (bounded work that never waits, and the deferred store).

What the runtime itself keeps: the system prompt (the caller's prompt + the memory snapshot
block rendered once when the session was opened, byte-identical all session so provider prompt
caches stay warm), the tool schemas, turn counters, and the recall block of the current user
turn. The ledger stores every message once; nothing is ever rewritten — compaction appends a
checkpoint and the projection serves the compacted view.

A ``SessionRuntime`` serializes its own turns with a lock; it is safe to share between threads.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from refold.errors import Conflict, InvalidInput, RefoldError, UpstreamError
from refold.messages.model import (
    IDENTITY_KEYS,
    Message,
    as_plain,
    chain_identities,
    content_text,
    is_tool_images,
    wire_form,
)
from refold.pricing import token_count
from refold.runtime.branches import (
    PLACE_ATTEMPTS,
    Diverge,
    adopt_in_family,
    note_unanswered,
    place,
)
from refold.runtime.chain import KnownChain, comparable, resent_result
from refold.runtime.checkpointer import Checkpointer
from refold.runtime.inline import InlineTurns, NeedsWorker, too_heavy_inline
from refold.runtime.mirror import SessionMirror
from refold.runtime.precompact import Precompactor
from refold.runtime.prepared import Prepared
from refold.runtime.recall import with_recall
from refold.runtime.recorded import note_request, note_system_prompt
from refold.runtime.rotation import Rotation
from refold.runtime.slides import WindowSlides
from refold.runtime.valid import provider_valid
from refold.runtime.view import ViewCache, detached
from refold.store.base import Store, StoredMessage

if TYPE_CHECKING:
    from refold.runtime.context import ContextOps
    from refold.runtime.host import RuntimeHost

log = logging.getLogger(__name__)


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
    """The per-session turn API. Create through ``Engine.open_session``."""

    def __init__(self, host: RuntimeHost, session_id: str, *, snapshot: str) -> None:
        self._host = host
        self._snapshot = snapshot  # frozen for the life of this runtime
        from refold.compaction.session import recorded_system_prompt  # lazy, as in ContextOps

        # the caller's system prompt: a resumed session starts with the one it recorded
        self._system_prompt: str | None = recorded_system_prompt(host.store, session_id)
        self._tools: list[dict[str, Any]] | None = None
        self._noted = (0, 0)  # the tools and window the ledger's latest events record
        self._lock = threading.RLock()
        self._root_id = session_id  # the session opened: a derived family's first one
        # where a history that is not an extension goes (the proxy's last full-path turn says:
        # "branch" for a derived session, "rewind" for a named one); a reply that finds
        # another writer's rows after its question goes the same way (``_placed_again``)
        self._diverge: Diverge = "rewind"
        self.mirror = SessionMirror(host.store, session_id, host.ops.base_count, host.session_moved)
        self.checkpointer = Checkpointer(host, self.mirror, self.system_text,
                                         lambda: self._tools, lambda: self._recall)
        self.inline = InlineTurns(self)
        self.slides = WindowSlides(self)  # a client's sliding window (refold.runtime.slides)
        self._last_sent_tokens: int | None = None  # estimate of the last prepared request
        self._last_base_estimate: int | None = None  # uncalibrated estimate of that request
        self.user_turns = 0
        self.tool_iterations = 0
        self._turn_tool_iterations = 0
        self._recall = ""  # this user turn's recalled-memory block (see refold.runtime.recall)
        self._recall_query: str | None = None  # a new user message past-session recall awaits
        self._rotation = Rotation()  # maps a re-sent history onto a compaction child
        self._refs = host.reference_link()  # @file/@session expansion (None: off)
        self._show_once = ""  # a note for the next user turn only (the resumed task state)
        # the output tokens the next request asks for (its max_tokens), when above the policy's
        # output_reserve_tokens: the next prepare compacts so prompt + output fit the window
        self.output_reserve: int | None = None
        self._closed = False
        self._on_loop = False  # the prepare under way runs on an event loop (light mode)
        # (messages, last identity) a prepare stored before it failed: its retry stores nothing
        self._unanswered: tuple[list[Message], str] | None = None

    # -- properties ------------------------------------------------------------------------
    @property
    def session_id(self) -> str:
        """The session turns go to now (a rotation moves it to the child)."""
        return self.mirror.session_id

    @property
    def store(self) -> Store:
        return self._host.store

    @property
    def ops(self) -> ContextOps:
        return self._host.ops

    @property
    def memory_snapshot(self) -> str:
        """The frozen memory block injected into the system prompt (empty if no memory)."""
        return self._snapshot

    @property
    def precompactor(self) -> Precompactor:
        return self.checkpointer.precompactor

    @property
    def view_reads(self) -> int:
        """Full projection reads for a turn (the rest reused the mirror's view)."""
        return self.mirror.view_reads

    @property
    def last_reply(self) -> tuple[str, int] | None:
        """(session id, seq) of the last recorded reply."""
        return self.mirror.last_reply

    def system_text(self, caller_prompt: str | None = None) -> str | None:
        """The system prompt sent: the caller's prompt, then the frozen memory snapshot."""
        prompt = caller_prompt if caller_prompt is not None else self._system_prompt
        parts = list(filter(None, (prompt, self._snapshot)))
        return "\n\n".join(parts) if parts else None

    # -- the turn ----------------------------------------------------------------------------
    def prepare(self, new_messages: list[Message], *, system_prompt: str | None = None,
                tools: list[dict[str, Any]] | None = None) -> Prepared:
        """Store ``new_messages`` and return the messages to send (compacting first if needed).

        It stores and returns, or raises before storing: the messages are validated and the
        context compacted (when they would take it over the threshold) before they are
        appended; after the append, a compaction that fails only leaves a warning (the turn
        goes on the current view). A retry of a call that failed anyway after storing (the
        store failing to read back, say) stores nothing twice."""
        if not isinstance(new_messages, list):
            raise InvalidInput("new_messages must be a list of chat messages")
        self.finish_turn()
        with self._lock:
            self.inline.flush()
            self.mirror.confirmed = None
            if system_prompt is not None:
                self._note_system_prompt(system_prompt)  # kept for resume and `refold context`
                self._system_prompt = system_prompt
            if tools is not None:
                self._tools = tools
            clean = [wire_form(m) for m in self.ops.validate(new_messages)]
            budget = self._budget_warnings(False)  # a refusal raises before anything is stored
            early: tuple[Any, int] | None = None
            stored = False
            if clean and not self._stored_by_failed_prepare(clean):
                self.mirror.chain = None  # library mode does not track the chain
                counts = self.ops.message_counts(clean)
                early = self._compact_before_storing(clean, counts)  # raises: nothing stored
                result = self.mirror.append_after_view(clean, counts)
                stored = True
                self._count_turns(clean)
                self._unanswered = (clean, result.appended[-1].identity)
            prepared = self._prepare_locked(early=early, stored=stored, budget=budget)
            self._unanswered = None
            return prepared

    def _compact_before_storing(self, clean: list[Message],
                                counts: list[int | None]) -> tuple[Any, int] | None:
        """Compact now if the view plus ``clean`` would cross the threshold, so a compaction
        that fails fails the call before anything is stored (unless ``clean`` outweighs the
        stored view: then there is too little stored to summarize, and it waits for the append). (the report, the estimate before)
        when it compacted, else None. The view is read afresh after a compaction, so the
        append extends it and the request is built without reading the store again. (The
        cached view serves the estimate unread: the append checks it is still the stored one,
        and a view moved by another writer is sized again after the append.)"""
        view = self.mirror.view
        if view is None or view.session_id != self.session_id:
            view = self.mirror.current_view()
        system = self.system_text()
        body = view.tokens + (self.ops.base_count({"role": "system", "content": system})
                              if system else 0)
        adding = sum(c if c is not None else self.ops.base_count(m)
                     for m, c in zip(clean, counts, strict=True))
        if adding > view.tokens:
            # the new messages are most of the context (a first turn, an import): only a
            # compaction that can include them has enough to summarize, so it runs after the
            # append (where a failure is a warning, not a lost turn)
            return None
        estimate = self.ops.total_from_base(body + adding, self._tools)
        report = self.checkpointer.preflight(estimate + self._reserve_excess(), view)
        if report is None and self.mirror.view is not None:
            return None
        self.mirror.current_view()  # ours or another compactor's checkpoint: the new view
        return (report, estimate) if report is not None else None

    def _stored_by_failed_prepare(self, clean: list[Message]) -> bool:
        """A retry of a ``prepare`` that stored ``clean`` and then failed (building the request
        raised): they are stored already and still the session's last rows, so the retry
        stores nothing again."""
        unanswered, self._unanswered = self._unanswered, None
        if unanswered is None or unanswered[0] != clean:
            return False
        last = self.store.last_message(self.session_id)
        if last is None or last.identity != unanswered[1]:
            return False
        self._unanswered = unanswered
        return True

    def prepare_history(self, history: list[Message], *,
                        tools: list[dict[str, Any]] | None = None,
                        diverge: Diverge = "rewind") -> Prepared:
        """Proxy mode: sync the client's whole history (no duplicates), return what to send —
        the client's own messages, a stretch already compacted replaced by its checkpoint
        (``refold.runtime.branches`` says where a history that is not an extension goes:
        ``diverge``). (``inline.prepare`` is the same turn for an event loop.)"""
        if not isinstance(history, list):
            raise InvalidInput("history must be a list of chat messages")
        self.finish_turn()
        with self._lock:
            self._diverge = diverge
            return self._prepare_history_locked(history, tools, False, diverge=diverge)

    def record(self, response: Message, *, usage: dict[str, Any] | None = None,
               model: str | None = None) -> bool:
        """Store the assistant reply, account usage, apply the post-response policy. True
        (recorded). (``inline.record`` is the same for an event loop.)"""
        message = self._checked_reply(response)
        usage = self._checked_usage(usage)
        self.finish_turn()
        with self._lock:
            turn_done, iterations = self._record_locked(message, usage, model, False)
        if turn_done:
            self._host.after_turn(self, iterations)
        return True

    def finish_turn(self, *, wait: bool = False) -> None:
        """Run the after-turn work an ``inline.record(hold_after_turn=True)`` held back, if
        any. It never waits for the store (a busy store hands it to a short-lived thread)
        unless ``wait`` (closing: done before this returns)."""
        iterations = self.inline.take_held()
        if iterations is None:
            return
        if wait:
            self._host.after_turn(self, iterations)
        else:
            self.inline.after_turn(iterations)

    def handle_error(self, error: UpstreamError, attempt: int) -> bool:
        """True when the context was compacted further so a retry can succeed."""
        with self._lock:
            self.inline.flush()
            self.checkpointer.trigger.note_no_reading()
            if error.kind != "overflow":
                return False
            sizes = self.checkpointer.after_overflow(attempt, self._last_sent_tokens)
            if sizes is None:
                return False
            before, after = sizes
            self._last_sent_tokens = after
            self.checkpointer.notice = (before, after)
            return after < before

    def note_unanswered(self) -> None:
        """The turn just prepared got no reply (its upstream call failed, or its client hung
        up first): mark where the stored chain ends, so a client that goes on without that
        turn's messages rewinds them (reversibly) rather than forking a branch (``branches``)."""
        with self._lock:
            self.inline.flush()
            note_unanswered(self.store, self.session_id)

    def take_compaction(self) -> tuple[int, int] | None:
        """(tokens before, tokens after) of a compaction that happened outside ``prepare`` (on
        the provider's usage after a reply, or after an overflow) and was not reported yet;
        None when there is none. Reported once; never waits (the proxy asks on its event
        loop, between its turns of this session)."""
        notice, self.checkpointer.notice = self.checkpointer.notice, None
        return notice

    def compact(self, *, force: bool = True) -> Any:
        """Compact now (``/compact``); the report, or None when nothing was done. Without
        ``force`` only when the context is over the threshold."""
        with self._lock:
            self.inline.flush()
            return self.checkpointer.compact(force=force)

    def use_tools(self, tools: list[dict[str, Any]] | None) -> None:
        """The tool schemas the next requests will carry, known before the first of them
        (``prepare(tools=…)`` sets them too): a resumed session's ``context_breakdown`` and
        ``compact`` count them before any turn, as the request will."""
        with self._lock:
            self._tools = tools

    # -- inspection --------------------------------------------------------------------------
    def context_breakdown(self) -> dict[str, Any]:
        """Tokens by part (system, memory, summary, tail by role, tool outputs, tool schemas)."""
        with self._lock:
            return self.checkpointer.breakdown(self._system_prompt, self._snapshot)

    def recent_rows(self, count: int) -> list[Message] | None:
        """The last ``count`` active rows up to the reply just recorded, from this turn's
        confirmed view (copies); None: read the store instead."""
        with self._lock:
            return self.mirror.recent_rows(count)

    def close(self) -> None:
        """Done with this runtime (the session stays resumable): memory providers get
        ``on_session_end``, once. The proxy calls it on eviction; ``Engine.close`` for the rest."""
        self.finish_turn(wait=True)
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                self.inline.flush()  # a deferred store nobody settled (the proxy always does)
            except RefoldError as exc:  # the client still holds them and re-sends them
                log.warning("session %s: storing deferred messages at close failed: %s",
                            self.session_id, exc)
        self._host.session_closed(self)

    # -- internals (``InlineTurns`` runs these under the lock too) -----------------------------
    def _prepare_history_locked(self, history: list[Message],
                                tools: list[dict[str, Any]] | None, light: bool,
                                defer: bool = False, diverge: Diverge = "rewind") -> Prepared:
        self._on_loop = light  # (read by ``new_messages_fit``: under the lock, as this)
        self.inline.flush()
        self.mirror.confirmed = None
        if tools is not None:
            self._tools = tools
        history = self._rotation.translate(self.store, self.session_id, history)
        if light and defer and self.mirror.store_ends_on_view() \
                and self.inline.defer_known_suffix(history):
            try:
                return self._prepare_locked(light, client=True)
            except BaseException:
                # the worker path takes over (or the turn fails): store now, as without defer
                self.inline.flush()
                raise
        if not self._sync_known_prefix(history) and not self.slides.sync_known(history):
            if light:
                raise NeedsWorker
            self._sync_history(history, diverge)
        return self._prepare_locked(light, client=True)

    def _sync_history(self, history: list[Message], diverge: Diverge) -> None:
        """The full path: validate, count and hash the whole history; place it in the ledger
        (``refold.runtime.branches``: append, branch or rewind), then store what is new —
        placed again if another writer stored there in between (a conversation opening alike)."""
        self.mirror.forget()
        valid = [wire_form(m) for m in self.ops.validate(history)]
        system, conversation = split_system(valid)
        sent: dict[int, Message] = {}  # results the client cleared, as it sent them
        window = conversation
        if any(m.get("role") == "assistant" for m in conversation):  # a reply re-spelled?
            conversation, identities = adopt_in_family(
                self.store, self._root_id, self.session_id, conversation, sent)
        else:
            identities = chain_identities(conversation)
        slid: list[StoredMessage] | None = None
        result = None

        def slide(members: list[str]) -> str | None:
            nonlocal slid
            slid = self.slides.slide(window, system, members, diverge)
            return self.session_id if slid is not None else None

        counts: list[int | None] = []
        forms = [sent.get(i, m) for i, m in enumerate(conversation)] if sent else None
        for attempt in range(PLACE_ATTEMPTS if conversation else 0):
            target, changed = place(self.store, self._root_id, self.session_id, identities,
                                    diverge, window=slide)
            if changed:
                self.precompactor.discard()  # its plan is of a chain no longer this one
            if target != self.session_id:
                self._move_to(target)
            if slid is not None:
                break
            counts = counts or self.ops.message_counts(conversation)
            result = self.mirror.sync(conversation, counts, identities, forms)
            if result is not None:
                break
            if attempt == PLACE_ATTEMPTS - 1:
                raise Conflict(f"session {self.session_id} kept changing under this request "
                               "(other writers)", hint="send the request again")
        self._note_system_prompt(system)
        self._system_prompt = system
        if slid is not None:
            self._count_turns([s.message for s in slid])
        elif result is not None:
            self._count_turns([s.message for s in result.appended])
            if result.rewound:
                self.precompactor.discard()

    def _move_to(self, session_id: str) -> None:
        """Turns continue in another session of this runtime's family (a branch)."""
        from refold.compaction.session import recorded_system_prompt  # lazy, as in ContextOps

        self.precompactor.discard()
        self.mirror.moved_to(session_id)
        self._system_prompt = recorded_system_prompt(self.store, session_id)

    def new_messages_fit(self, messages: list[Message]) -> None:
        """``NeedsWorker`` when a light-mode prepare would store new messages too heavy for the
        event loop (``too_heavy_inline``); called before anything is stored."""
        if self._on_loop and too_heavy_inline(messages):
            raise NeedsWorker

    def _sync_known_prefix(self, history: list[Message]) -> bool:
        """The fast path (see ``refold.runtime.chain``): when ``history`` starts with the chain
        this runtime last stored, only the new suffix is validated, counted, hashed and
        appended — after the stored tip, checked in the write transaction. False: use the full
        path (nothing was stored)."""
        found = self.mirror.known_suffix(history, self.ops.validate)
        if found is None:
            return False
        chain, lead, suffix = found
        self.new_messages_fit(suffix)
        appended = self.mirror.append_known(chain, suffix, self.ops.message_counts(suffix))
        if appended is None:
            return False
        self._count_turns([s.message for s in appended])
        # last: if it must wait (inline), a second call finds the rows stored and redoes it
        system = self._system_of(lead)
        self._note_system_prompt(system)
        self._system_prompt = system
        return True

    @staticmethod
    def _system_of(lead: list[Message]) -> str | None:
        return split_system(lead)[0]

    @staticmethod
    def _checked_usage(usage: Any) -> dict[str, Any] | None:
        """``record``'s usage: a dict, the SDK's usage object (``response.usage``) or None."""
        usage = as_plain(usage)
        if usage is not None and not isinstance(usage, dict):
            raise InvalidInput("usage must be the reply's usage (a dict, or the SDK's "
                               f"response.usage), not {type(usage).__name__}")
        return usage

    def _checked_reply(self, response: Message) -> Message:
        response = as_plain(response)  # the openai SDK's ChatCompletionMessage, say
        role = response.get("role", "assistant") if isinstance(response, dict) else None
        if role != "assistant":  # (a user or tool message is not the reply: refused, not stored)
            raise InvalidInput(f"response must be an assistant message (a dict), not {role!r}")
        message = _normalize_reply(response)
        self.ops.validate([message])
        return message

    def _record_locked(self, message: Message, usage: dict[str, Any] | None,
                       model: str | None, light: bool) -> tuple[bool, int]:
        self.inline.flush()
        if light and too_heavy_inline([message]):
            raise NeedsWorker  # a long reply is counted, hashed and stored from a worker
        counts = self.ops.message_counts([message])
        usage = usage or {}
        prompt_tokens = _int(usage.get("prompt_tokens"))
        completion = _int(usage.get("completion_tokens"))
        cached = _int((usage.get("prompt_tokens_details") or {}).get("cached_tokens")
                      if isinstance(usage.get("prompt_tokens_details"), dict) else 0)
        if light and prompt_tokens >= self.checkpointer.light_limit:
            raise NeedsWorker  # the post-response policy may compact: nothing stored yet
        # the totals move in the reply's own transaction (one commit per record)
        # priced with the user's overrides (refold.runtime.cost); None when no usage came
        delta = self.ops.cost.usage_of({"prompt_tokens": prompt_tokens,
                                        "completion_tokens": completion,
                                        "prompt_tokens_details": {"cached_tokens": cached},
                                        # an Anthropic upstream's cache writes, priced as such
                                        "cache_creation_input_tokens": _int(
                                            usage.get("cache_creation_input_tokens")),
                                        "cache_creation": usage.get("cache_creation")},
                                       model)
        self.mirror.append_reply(message, counts, delta,
                                 moved=self._needs_worker if light else self._placed_again)
        if prompt_tokens and self._last_base_estimate is not None:
            self.ops.observe_estimate(self._last_base_estimate, prompt_tokens)
        turn_done = not message.get("tool_calls")
        if not turn_done:
            self.tool_iterations += 1
            self._turn_tool_iterations += 1
        self.checkpointer.post_response(prompt_tokens or None)
        iterations, self._turn_tool_iterations = self._turn_tool_iterations, (
            0 if turn_done else self._turn_tool_iterations)
        return turn_done, iterations

    @staticmethod
    def _needs_worker(chain: KnownChain) -> None:
        raise NeedsWorker  # placing a history again reads and may fork: not on an event loop

    def _placed_again(self, chain: KnownChain) -> None:
        """Another writer appended after the question this reply answers (two processes
        answering the same turn at once): place the question's history again as a re-sent
        history is placed (``refold.runtime.branches``: a branch, or a reversible rewind for a
        named session), so the reply follows its own question. Conflict when that history is
        no longer the session's (nothing stored)."""
        rows = self.store.get_messages(self.session_id)
        end = next((i for i, row in enumerate(rows) if row.identity == chain.tip), None)
        if end is None:
            raise Conflict(f"session {self.session_id} changed under the reply",
                           hint="another process rewound this conversation; retry")
        identities = [row.identity for row in rows[:end + 1]]
        target, _ = place(self.store, self._root_id, self.session_id, identities,
                          self._diverge)
        log.info("session %s: another writer answered the same turn first; this reply goes "
                 "to %s", self.session_id, "its branch " + target
                 if target != self.session_id else "the session, after a reversible rewind")
        self.precompactor.discard()
        if target != self.session_id:
            self._move_to(target)

    def _count_turns(self, messages: Sequence[Message]) -> None:
        memory = self._host.memory
        users = [m for m in messages if m.get("role") == "user" and not is_tool_images(m)]
        self.user_turns += len(users)
        if memory is not None and users:  # the memory tool's per-turn budget; what a review
            memory.begin_turn(self.checkpointer.trigger.note, self.session_id)  # refused
        if users:  # a new user turn: its recall block, fixed for the whole turn
            self._recall = self._host.turn_recall(content_text(users[-1]))
            # past-session recall searches the store: ``_prepare_locked`` adds it (off the
            # event loop), so a turn that stops here and resumes in a worker still gets it
            self._recall_query = (content_text(users[-1]) if self._host.recalls_archive
                                  else None)
            if self._show_once:  # placed like recall: this turn's user message, not stored
                self._recall = "\n\n".join(p for p in (self._show_once, self._recall) if p)
                self._show_once = ""

    def _add_archive_recall(self, light: bool) -> None:
        """The pending user message's past-session recall joins this turn's block (a search:
        never inline on an event loop)."""
        if light:
            raise NeedsWorker
        query, self._recall_query = self._recall_query, None
        block = self._host.archive_recall(query or "", self.session_id)
        self._recall = "\n\n".join(p for p in (self._recall, block) if p)

    def show_once(self, note: str) -> None:
        """Show ``note`` to the model with the next user turn (all its tool iterations), once."""
        self._show_once = note

    def _note_system_prompt(self, system: str | None) -> None:
        """Keep the client's system prompt and its tools' size in the ledger (``recorded``)."""
        if (len(self._tools or ()), self.ops.context_length) != self._noted:
            self._noted = note_request(self.store, self.session_id, self._tools,
                                       self.ops.counter.count_tools, self.ops.context_length)
        if system is not None and system != self._system_prompt:
            note_system_prompt(self.store, self.session_id, system)

    def _request(self, view: ViewCache, light: bool = False,
                 client: bool = False) -> tuple[list[Message], int]:
        """The messages to send (fresh wire-form dicts) and the sum of their base counts: O(1)
        on top of the view's running sum (the system message, the user messages whose
        references are expanded (``refold.references.link``), the one recall extends). With
        ``client`` (proxy turns) each tail row goes as the client sent it."""
        system = self.system_text()
        lead: list[Message] = [{"role": "system", "content": system}] if system else []
        body = view.tokens + sum(map(self.ops.base_count, lead))
        out = [detached(m) for m in lead] + view.copies()
        if client:
            body += self._as_client_sent(view, out, len(lead))
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

    def _as_client_sent(self, view: ViewCache, out: list[Message], lead: int) -> int:
        """Put the client's own form of each tail row into ``out`` where the stored one differs
        (a reply stored with ``reasoning_content`` that the client re-sent without it, say):
        identity ignores such keys, the upstream must not. The mirror's chain holds the
        client's forms (it is rebuilt from the request whenever they differ from it). Returns
        the change in base tokens."""
        chain = self.mirror.chain
        rows = view.rows
        if chain is None or chain.session_id != self.session_id or not rows:
            return 0
        forms: Sequence[Message] = chain.messages
        pending = self.inline.pending
        if pending is not None and pending.chain is chain:  # the view has the deferred rows
            forms = [*forms, *map(comparable, pending.suffix)]
        elif chain.tip != view.tip:
            return 0  # the chain does not end where the view does: nothing to align
        if len(forms) < len(rows):
            return 0
        client = forms[len(forms) - len(rows):]
        if list(client) == list(map(attrgetter("message"), rows)):
            return 0  # every row as its client sent it (the usual turn: compared at C speed)
        offset = lead + len(view.view) - len(rows)
        delta = 0
        for j, row in enumerate(rows):
            sent = client[j]
            if row.seq in view.overrides or sent == row.message \
                    or sent == comparable(row.message):  # (the first: no copy, usually)
                continue
            if view.view[offset - lead + j] != row.message:
                continue  # the checkpoint merged its summary into this row: keep it
            if not (_same_identity(sent, row.message) or resent_result(sent, comparable(row.message))):
                # (cannot happen while the chain is current; never send another) — said
                # aloud: it is a request carrying a message its client spelled otherwise
                log.warning("session %s: message %d goes upstream as stored; the client sent "
                            "another form of it", self.session_id, row.seq)
                continue
            replacement = detached(sent)
            delta += self.ops.base_count(replacement) - self.ops.base_count(out[offset + j])
            out[offset + j] = replacement
        return delta

    def _prepare_locked(self, light: bool = False, client: bool = False, *,
                        early: tuple[Any, int] | None = None, stored: bool = False,
                        budget: list[str] | None = None) -> Prepared:
        """The request for the current view. ``early``: the compaction ``prepare`` did before
        storing (report, tokens before). ``stored``: messages were stored by this call, so it
        must not fail any more: a compaction failing now leaves a warning instead. ``budget``:
        the budget's warnings when the caller checked it already (before storing)."""
        warnings: list[str] = list(budget) if budget is not None else \
            self._budget_warnings(light)
        if light and not self.mirror.view_is_confirmed():
            raise NeedsWorker  # the view may need a full read
        if self._recall_query is not None:
            self._add_archive_recall(light)
        view = self.mirror.current_view()
        messages, body = self._request(view, light, client)
        tokens = self.ops.total_from_base(body, self._tools)
        extra = self._reserve_excess()
        if light and tokens + extra >= self.checkpointer.light_limit:
            raise NeedsWorker  # nothing decided yet: the worker call redoes it all
        self.output_reserve = None
        try:
            report = self.checkpointer.preflight(tokens + extra, view)
        except RefoldError as exc:
            if not stored:
                raise
            log.warning("session %s: compaction failed after the turn was stored: %s",
                        self.session_id, exc)
            warnings.append(f"compaction failed, the context was sent uncompacted: {exc}")
            report = None
        before = None
        if report is not None or self.mirror.view is None:
            # ours, or another compactor's (report None, view dropped): send the latest view
            before = tokens if report is not None else None
            view = self.mirror.current_view()
            messages, body = self._request(view, client=client)
            tokens = self.ops.total_from_base(body, self._tools)
        if report is None and early is not None:
            report, before = early  # compacted before the messages were stored
        messages, repaired = provider_valid(messages)
        if repaired is not None:  # rare: recount what is really sent
            warnings.append(repaired)
            body = sum(map(self.ops.base_count, messages))
            tokens = self.ops.total_from_base(body, self._tools)
        warnings.extend(self.checkpointer.trigger.take_warnings())
        if self._refs is not None:
            warnings.extend(self._refs.take_warnings())
        if tokens > self.ops.context_length:
            warnings.append(f"context is {tokens} tokens, over the {self.ops.context_length} "
                            "token window; the provider may reject it")
        self.checkpointer.maybe_precompact(tokens, view)
        self._last_sent_tokens = tokens
        self._last_base_estimate = self.ops.base_request(body, self._tools)
        self.checkpointer.trigger.note_request_sent()
        return Prepared(messages=messages, tokens=tokens, threshold=self.ops.threshold,
                        context_length=self.ops.context_length, compaction=report,
                        warnings=warnings, tokens_before=before)


    def _reserve_excess(self) -> int:
        """How much further a request's own ``output_reserve`` (its ``max_tokens``) lowers the
        trigger than the policy's reserve does: the preflight acts as if the request were that
        much bigger, so the prompt plus the output it asks for fits the window."""
        reserve, window = self.output_reserve, self.ops.context_length
        if not reserve or reserve <= self.ops.policy.output_reserve_tokens:
            return 0
        if window - reserve < window * 0.25:  # as threshold_for: it must leave a usable window
            return 0
        return max(0, self.ops.threshold - (window - int(reserve)))

    def _budget_warnings(self, light: bool) -> list[str]:
        """The per-session budget (``refold.runtime.cost``): a warning, or ``BudgetExceeded``
        before anything is sent. It reads the session's stored cost, so light mode hands the
        turn to a worker when a budget is set."""
        if self.ops.cost.budget is None:
            return []
        if light:
            raise NeedsWorker
        warning = self.ops.cost.check_budget(self.store.get_session(self.session_id).cost_usd)
        return [warning] if warning else []


def _same_identity(a: Message, b: Message) -> bool:
    """Do ``a`` and ``b`` agree on every key a message's identity hashes?"""
    return all(a.get(k) == b.get(k) for k in IDENTITY_KEYS)


def _normalize_reply(response: Message) -> Message:
    """The reply as stored: wire form, role assistant by default; an empty reply (no content,
    no tool calls — some providers send one) is kept as empty text rather than refused."""
    message = wire_form({"role": "assistant", **response})
    if not message.get("tool_calls"):
        message.pop("tool_calls", None)
        if message.get("content") is None and not message.get("reasoning_content"):
            message["content"] = ""
    return message


_int = token_count  # a usage report's count as tokens
