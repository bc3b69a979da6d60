"""``SessionMirror``: a runtime's copy of its stored session, kept in step with its own writes.

Two caches, both only ever trusted while the store agrees (see their modules):

- ``chain`` (``refold.runtime.chain.KnownChain``): the stored active chain as the runtime last
  wrote or synced it, so a re-sent history that starts with it costs O(new messages);
- ``view`` (``refold.runtime.view.ViewCache``): the projection as last read or written, with a
  running token sum, so a turn that follows its own writes needs one small ``view_tip`` query
  (or none: ``confirmed``) instead of re-reading and re-counting the projection.

A client that sends a sliding window of its conversation (``refold.runtime.window``) sees
only that window: ``window`` is the seq of the stored row its first message is, and both the
view and every projection read here start there (a checkpoint is applied while the window
still starts inside the stretch it stands for, the head rows that slid out left out of it:
``slid_checkpoint``). The known chain then holds the window's messages.

Every write to the session's messages goes through here, so nothing the runtime did is left
out of the caches; a write the mirror cannot account for (another writer, a rewind, a
checkpoint) drops them and the next read is a full one. The mirror never decides anything about
turns, compaction or memory: that is ``SessionRuntime`` and ``Checkpointer``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any

from refold import _records as records
from refold.errors import Conflict, MessageValidationError, WouldBlock
from refold.messages.model import Message, wire_form
from refold.runtime.chain import KnownChain
from refold.runtime.view import ViewCache
from refold.store.base import (
    AppendResult,
    Checkpoint,
    Projection,
    Store,
    StoredMessage,
    Usage,
    ViewTip,
)

CountFn = Callable[[Message], int]
ValidateFn = Callable[[list[Message]], list[Message]]
NEW_AT_MOST = 16  # new messages a window that slides on brings at most (more: the full path)


def leading_system(history: list[Message]) -> int:
    """How many system/developer messages ``history`` opens with."""
    leading = 0
    while leading < len(history) and isinstance(history[leading], dict) \
            and history[leading].get("role") in ("system", "developer"):
        leading += 1
    return leading


class SessionMirror:
    """The stored session ``session_id`` as this runtime last saw it."""

    def __init__(self, store: Store, session_id: str, base_count: CountFn,
                 on_move: Callable[[str], None] | None = None) -> None:
        self.store = store
        self.session_id = session_id
        # every session this runtime's turns went to, in order: its first, then each branch of
        # its family (``refold.runtime.branches``) and rotation child it moved to. The runtime's
        # end is each one's end (its memory flush): a proxy runtime of a derived family moves
        # between the branches of conversations that open alike (its end flushed only the one
        # it was in last before, and the engine's end its first: a middle branch never was).
        self.held: dict[str, None] = {session_id: None}
        self._on_move = on_move  # told of each move (the engine's memory flush bookkeeping)
        self._count = base_count
        self.chain: KnownChain | None = None  # the stored chain as of our last write (proxy)
        self.view: ViewCache | None = None  # the projection as of our last read/write
        # the view, when this turn's own append (expect_last) saw the store end exactly where
        # it does: current without a ``view_tip`` read; reset at every turn's start
        self.confirmed: ViewCache | None = None
        # (the store's commit mark, the view and its tip) when our own append confirmed the
        # view: while the store says nothing was committed since, it is still current
        self._marked: tuple[object, ViewCache, tuple[Any, ...]] | None = None
        self.view_reads = 0  # full projection reads for a turn (the rest reused ``view``)
        self.last_reply: tuple[str, int] | None = None  # (session id, seq) of the last record
        # the seq a client's sliding window starts at (None: its history is the whole session);
        # set by each full-path placement of a history, kept by the fast path (same window)
        self.window: int | None = None

    # -- state -------------------------------------------------------------------------------
    def forget(self) -> None:
        """Drop both caches (a write they cannot account for happened or may happen)."""
        self.chain = self.view = self.confirmed = None
        self._marked = None

    def moved_to(self, session_id: str) -> None:
        """The runtime continues in ``session_id`` (a rotation's child, a branch of its family):
        nothing cached applies."""
        self.view = None
        self.window = None
        self.session_id = session_id
        self.held[session_id] = None
        if self._on_move is not None:
            self._on_move(session_id)

    def view_is_confirmed(self) -> bool:
        return self.view is not None and self.view is self.confirmed

    def mark_confirmed(self) -> None:
        """``confirmed`` was just set by this thread's append: remember the store's mark of
        that commit (stores without marks: nothing to remember)."""
        view = self.confirmed
        mark_of = getattr(self.store, "commit_mark", None)
        mark = mark_of() if view is not None and mark_of is not None else None
        self._marked = None if mark is None or view is None else (mark, view, _state(view))

    def unchanged_view(self) -> bool:
        """True when ``view`` is the one our last append confirmed, unchanged, and nothing at
        all was committed to the store since (one cheap check instead of a ``view_tip``
        read). False: unknown — read the tip."""
        marked, view = self._marked, self.view
        if marked is None or view is None or marked[1] is not view or _state(view) != marked[2]:
            return False
        unchanged = getattr(self.store, "unchanged_since", None)
        try:
            return unchanged is not None and bool(unchanged(marked[0]))
        except WouldBlock:  # the writer is busy: the tip read (a reader) may still be free
            return False

    def store_ends_on_view(self) -> bool:
        """Does the stored session still end exactly where the cached view does (one small
        ``view_tip`` read)? The deferred store sends the request before it stores, so when
        another process moved the session (another worker served the last turn, or compacted)
        the request would be void and sent again: a second upstream call for one turn. Seen
        first, that turn takes the storing path instead and is sent once."""
        view = self.view
        if view is None or view.session_id != self.session_id:
            return False
        return self.unchanged_view() or view.current(self.store.view_tip(self.session_id))

    # -- reading -----------------------------------------------------------------------------
    def current_view(self) -> ViewCache:
        """The projection as a ``ViewCache``: ours when the store's tip says it is still
        current (one small query), else a full read (kept when consistent)."""
        view = self.view
        if view is not None and view is self.confirmed and view.window == self.window:
            return view  # this turn's own append saw the store end here (no read needed)
        tip = self.store.view_tip(self.session_id)
        if view is not None and view.session_id == self.session_id \
                and view.window == self.window and view.current(tip):
            return view
        self.view_reads += 1
        projection = self.read_projection()
        fresh = ViewCache.of(projection, tip, self._count)
        self.view = fresh if fresh.trusted else None  # a racing writer: use once, re-read next
        return fresh

    def read_projection(self) -> Projection:
        """The stored projection, its checkpoint applied only while the rows it replaced are
        still the active chain: a rewind into a compacted stretch (the client went back to an
        earlier point) leaves the checkpoint summarizing messages the client no longer sends,
        so then the active rows are served whole (the next compaction plans from them).

        With a sliding ``window``: the active rows from its first one. The checkpoint is
        applied while the window still starts inside the stretch it stands for (its kept head
        or the summarized rows, ``slid_checkpoint``): a window that slid by a turn keeps the
        summary instead of being compacted again at every turn. A window that starts before
        that stretch, or after its end (the summary would stand only for messages the client
        no longer sends), sets the checkpoint aside, so a compaction planned from these rows
        follows it (``Projection.set_aside``) and stands for the window alone."""
        window = self.window
        if window is None:
            projection = self.store.projection(self.session_id)
            checkpoint = projection.checkpoint
            if checkpoint is None or (checkpoint.details.get("window") is None and
                                      self._still_active(checkpoint.last_seq)):
                return projection
            rows = self.store.get_messages(self.session_id)
            if checkpoint.details.get("window") is None:
                return Projection(self.session_id, None, rows)  # (rewound into: as before)
            return Projection(self.session_id, None, rows, set_aside=checkpoint.id)
        checkpoint = self.store.latest_checkpoint(self.session_id)
        if checkpoint is not None and head_start(checkpoint) <= window <= checkpoint.last_seq:
            projection = self.store.projection(self.session_id)
            if projection.checkpoint is not None and projection.checkpoint.id == checkpoint.id \
                    and self._still_active(checkpoint.last_seq):
                stretch = self.store.get_messages(self.session_id,
                                                  start_seq=head_start(checkpoint),
                                                  end_seq=checkpoint.last_seq)
                carried = slid_checkpoint(projection.checkpoint, window, stretch)
                if carried is not None:
                    return records.replace(projection, checkpoint=carried, window=window)
        rows = self.store.get_messages(self.session_id, start_seq=window)
        return Projection(self.session_id, None, rows, window=window,
                          set_aside=checkpoint.id if checkpoint is not None else None)

    def _still_active(self, seq: int) -> bool:
        return bool(self.store.get_messages(self.session_id, start_seq=seq, end_seq=seq))

    def recent_rows(self, count: int) -> list[Message] | None:
        """The last ``count`` active rows up to the reply just recorded, from this turn's
        confirmed view (copies); None when the view cannot answer (not confirmed this turn, or
        a checkpoint hides older rows it would need): read the store instead."""
        view = self.confirmed
        if view is None or view is not self.view or self.last_reply is None \
                or self.last_reply != (self.session_id, view.last_seq):
            return None
        if len(view.rows) < count and view.checkpoint is not None:
            return None
        return list(map(dict, map(_MESSAGE, view.rows[-count:])))

    # -- the known chain (proxy) -------------------------------------------------------------
    def known_suffix(self, history: list[Message], validate: ValidateFn
                     ) -> tuple[KnownChain, list[Message], list[Message]] | None:
        """``history`` as the chain last stored plus new messages: (the chain, the history's
        leading system messages and the new messages, validated, in wire form). None when the
        chain is unknown or ``history`` does not start with it, or a new message is invalid
        (the full path reports that, with the message's real index)."""
        chain = self.chain
        if chain is None or chain.session_id != self.session_id:
            return None
        leading = leading_system(history)
        known = chain.known_prefix(history[leading:])
        if known is None:  # a reply of several calls re-sent split (Codex)?
            body = chain.regrouped(history[leading:])
            if body is None:
                return None
            history, known = history[:leading] + body, len(chain.messages)
        try:
            valid = [wire_form(m) for m in
                     validate(history[:leading] + history[leading + known:])]
        except MessageValidationError:
            return None
        return chain, valid[:leading], valid[leading:]

    def known_window(self, history: list[Message], validate: ValidateFn
                     ) -> tuple[int, list[Message], list[Message], list[Message]] | None:
        """``history`` as the client's sliding window slid on: the known chain of a window
        (``window`` set: the full path placed one) without its first ``k`` messages, then new
        messages. (``k``, the history's leading system messages and the new messages, validated
        in wire form, and the window's known messages in the chain's forms) for the smallest
        such ``k`` (the longest stretch, as ``refold.runtime.window.match_tail`` takes), or
        None: no window known, or the rest is not the chain's end then at least one new
        message, or the stretch left is shorter than a window continuing a tail needs (two
        messages, one the model's), or a new message is invalid."""
        chain = self.chain
        if chain is None or self.window is None or chain.session_id != self.session_id:
            return None
        leading = leading_system(history)
        body = history[leading:]
        count = len(chain.messages)
        # where the body holds the chain's last message with new ones after it, from the end
        # (the longest stretch first): a request that does not slide on is told in a few
        # comparisons (the proxy asks each runtime of the tenant it holds)
        for end in range(len(body) - 2, max(len(body) - 2 - NEW_AT_MOST, 0), -1):
            if end + 1 >= count or not chain.ends_at(body[end]):
                continue  # (a stretch of two at least, without the chain's first message)
            drop = count - end - 1
            stretch = chain.tail(drop)
            if stretch.known_prefix(body) is None:
                continue
            if not any(m.get("role") == "assistant" for m in stretch.messages):
                return None
            try:
                valid = [wire_form(m) for m in validate(history[:leading] + body[end + 1:])]
            except MessageValidationError:
                return None
            return drop, valid[:leading], valid[leading:], list(stretch.messages)
        return None

    def append_known(self, chain: KnownChain, suffix: list[Message],
                     counts: list[int | None]) -> list[StoredMessage] | None:
        """Append ``suffix`` right after ``chain``'s tip (checked in the write transaction);
        the appended rows, or None when another writer moved the session (nothing stored)."""
        try:
            result = self.store.append_messages(self.session_id, suffix, token_counts=counts,
                                                expect_last=chain.tip)
        except Conflict:  # another writer moved the session: sync everything
            self.chain = None
            self.view = None
            return None
        self.extend_view(result.appended, chain.tip, result.tip)
        tip = result.appended[-1].identity if result.appended else chain.tip
        self.chain = chain.extended(suffix, tip)
        return result.appended

    def sync(self, conversation: list[Message], counts: list[int | None],
             identities: Sequence[str], forms: list[Message] | None = None
             ) -> AppendResult | None:
        """The full path, after ``refold.runtime.branches.place``: the store appends what of
        ``conversation`` (its chain identities ``identities``) is new after the session's
        stored chain — which must still end on one of them (a prefix of the conversation, as
        placing left it) when the write commits. None, nothing written, when another writer
        stored something else there meanwhile (its rows are never rewound: the caller places
        the history again). The chain is known again when the stored active chain then ends
        on the conversation's last identity — it is exactly ``conversation`` (kept as
        ``forms``, the client's own form of each message, when given: a result it cleared)."""
        self.chain = None
        self.view = None  # the store may rewind: read the projection afresh
        self.window = None  # the history is the whole conversation
        stored = self.store.view_tip(self.session_id).last_identity
        if stored is not None and stored not in identities:
            return None
        try:
            # (an empty session must still be empty: another writer's first rows are never
            # rewound by a conversation that began there at the same moment)
            result = self.store.sync_messages(self.session_id, conversation, token_counts=counts,
                                              expect_last="" if stored is None else stored)
        except Conflict:
            return None
        tip = identities[-1]
        end = result.appended[-1].identity if result.appended else \
            self.store.view_tip(self.session_id).last_identity
        if end == tip:
            self.chain = KnownChain.of(self.session_id,
                                       conversation if forms is None else forms, tip)
        return result

    def slide(self, start_seq: int, window: list[Message], suffix: list[Message],
              counts: list[int | None], tip: str, *, keep_view: bool = False
              ) -> AppendResult | None:
        """A client's sliding window continues this session (``refold.runtime.window``): its
        first messages are the stored rows from ``start_seq`` to the last one (``tip``), the
        rest (``suffix``) is appended after it — checked in the write transaction. The view
        starts at ``start_seq`` from now on and the known chain is the window (``window``:
        each message in the form the request carries it). None when another writer moved
        the session meanwhile (nothing stored).

        ``keep_view`` (the window slid on from the one this runtime stored last): the cached
        view, when it ends on ``tip`` and holds no checkpoint, is kept — its rows before
        ``start_seq`` dropped, the appended rows added (``ViewCache.slide_to``) — instead of
        a full read of the new window."""
        view = self.view if keep_view else None
        self.forget()
        try:
            result = self.store.append_messages(self.session_id, suffix, token_counts=counts,
                                                expect_last=tip)
        except Conflict:
            return None
        self.window = start_seq
        end = result.appended[-1].identity if result.appended else tip
        self.chain = KnownChain.of(self.session_id, window, end)
        if view is not None and view.session_id == self.session_id and view.tip == tip \
                and view.slide_to(start_seq, self._count):
            self.view = view
            self.extend_view(result.appended, tip, result.tip)
        return result

    # -- appending -----------------------------------------------------------------------------
    def append_after_view(self, messages: list[Message], counts: list[int | None],
                          usage: Usage | None = None) -> AppendResult:
        """Append after the cached view's tip (so the view can be extended), or, when that is
        unknown or another writer moved it, wherever the session ends now (view dropped)."""
        view = self.view
        if view is not None and view.session_id == self.session_id and view.tip is not None:
            with contextlib.suppress(Conflict):
                result = self.store.append_messages(self.session_id, messages,
                                                    token_counts=counts, expect_last=view.tip,
                                                    usage=usage)
                self.extend_view(result.appended, view.tip, result.tip)
                return result
        self.view = None
        return self.store.append_messages(self.session_id, messages, token_counts=counts,
                                          usage=usage)

    def append_reply(self, message: Message, counts: list[int | None],
                     usage: Usage | None = None,
                     moved: Callable[[KnownChain], None] | None = None) -> None:
        """Append the reply (and its usage) right after the history it answers (the known
        chain's tip); keep the known chain only if it still ends where we think.

        When another writer appended after that tip first (two processes answering the same
        turn at once), ``moved(chain)`` places the history again (a branch, or a reversible
        rewind: ``SessionRuntime``) and the reply goes after the tip there — never after the
        other writer's rows, which would give one question two replies in a row. ``moved``
        may raise (nothing stored; the known chain kept for the retry). Without ``moved``, or
        without a known chain, the reply goes after the cached view or where the session
        ends (the library's ``record`` after its own ``prepare``)."""
        chain, self.chain = self.chain, None
        result = None
        if chain is not None and chain.session_id == self.session_id:
            try:
                try:
                    result = self.store.append_messages(self.session_id, [message],
                                                        token_counts=counts,
                                                        expect_last=chain.tip, usage=usage)
                except Conflict:  # someone else wrote after the question
                    if moved is None:
                        raise
                    moved(chain)  # the history placed again: this runtime's session now
                    result = self.store.append_messages(self.session_id, [message],
                                                        token_counts=counts,
                                                        expect_last=chain.tip, usage=usage)
                    chain = records.replace(chain, session_id=self.session_id)
            except Conflict:
                if moved is not None:
                    self.chain = chain
                    raise
            except BaseException:
                self.chain = chain  # nothing was stored (busy, say): what we knew still holds
                raise
            else:
                self.chain = chain.extended([message], result.appended[-1].identity)
                self.extend_view(result.appended, chain.tip, result.tip)
        if result is None:
            result = self.append_after_view([message], counts, usage)
        self.last_reply = (self.session_id, result.appended[-1].seq)

    def extend_view(self, rows: list[StoredMessage], expected_tip: str,
                    store_tip: ViewTip | None = None) -> None:
        """Rows were appended with ``expect_last=expected_tip``: extend the view if it ended
        there, else drop it. ``store_tip`` (the append's ``AppendResult.tip``) equal to the
        extended view confirms it current for the rest of this turn."""
        view = self.view
        if view is None or view.session_id != self.session_id or view.tip != expected_tip \
                or not view.extend(rows, self._count):
            self.view = self.confirmed = None
            return
        self.confirmed = view if store_tip is not None and view.current(store_tip) else None
        self.mark_confirmed()


_MESSAGE = attrgetter("message")


def _state(view: ViewCache) -> tuple[Any, ...]:
    return (view.session_id, view.last_seq, view.tip, view.checkpoint_id, len(view.rows))



def head_start(checkpoint: Checkpoint) -> int:
    """The seq of the first row a checkpoint's view held: its sliding window's first row, or
    the first row it summarized (its kept head copies the rows from there)."""
    window = checkpoint.details.get("window")
    return int(window) if window is not None else checkpoint.first_seq


def slid_checkpoint(checkpoint: Checkpoint, window: int,
                    rows: list[StoredMessage]) -> Checkpoint | None:
    """``checkpoint`` as it applies to a sliding window that starts at ``window``, inside the
    stretch it stands for (``head_start(checkpoint) <= window <= checkpoint.last_seq``;
    ``rows``: the active rows of that stretch): the head rows that slid out are dropped from
    its kept head; the summary stays (it stands for rows the window still holds, and for the
    ones before them that the client sent earlier in this conversation). None when the kept
    head does not line up with the rows it copies (nothing to trim safely)."""
    details = checkpoint.details
    if window == head_start(checkpoint):
        return checkpoint
    head = list(details.get("head") or [])
    if len(head) > len(rows) or any(
            m.get("role") != r.message.get("role")
            or m.get("tool_call_id") != r.message.get("tool_call_id")
            for m, r in zip(head, rows, strict=False)):
        return None
    drop = sum(1 for r in rows if r.seq < window)
    return records.replace(checkpoint, details={**details, "head": head[drop:]})
