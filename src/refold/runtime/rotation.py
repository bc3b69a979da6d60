"""Proxy clients across ``rotate_on_compaction``: map a re-sent history onto the child session.

With rotation, a compaction starts a child session holding the compacted view (summary + kept
tail, the "carried" rows) and ends the parent. A proxy client does not know: it keeps
re-sending its whole history. Synced as is against the child, that history would rewind the
carried rows and store everything again. So each rotation records an event on the child:

    {"parent": id, "carried": C, "covers": K, "last_covered": content hash, "first": hash}

— the child's first ``C`` rows stand for the first ``K`` messages of the client's conversation
(the system prompt aside), the last of which has hash ``last_covered`` and the first ``first``
(a history that does not open with it is not the whole conversation: a sliding window, whose
message ``K - 1`` may be a reply worded as the covered one is). ``translate`` turns a
history ``system + conversation`` into ``system + carried rows + conversation[K:]``, which the
ordinary sync (and its fast path) then matches against the child row for row. Chains of
rotations compose: a child's ``K`` is its parent's ``K`` plus the parent's rows after its own
carried ones.

``rotate_session`` is the one way a session rotates (the runtime after a checkpoint, and
``refold compact --rotate``): child created with the compacted view, rotation recorded, state
carried once, parent ended.

The same step gives the child a copy of the latest task-state events (the recorded system
prompt, the todo list: ``refold.compaction.session.carry_state_events``), so a resumed child
has them as its own.

A client that sends a sliding window of its conversation (``refold.runtime.window``) drops
its oldest messages, so ``K`` counts nothing there: a window that holds the last covered
message is translated from that message back (``window_in_child``: the covered part becomes
the carried rows from the first one it still holds, the summary when it starts in the stretch
the summary stands for), and only when the result continues the child.

A history that is shorter than ``K`` or whose message ``K - 1`` is not the covered one (the
client edited or dropped a message from before the rotation), and that is no such window, is
not translated: the plain sync keeps every message (rewinding as usual), it just cannot reuse
the compacted view.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from refold._records import dataclass
from refold.compaction.session import carry_state_events
from refold.compaction.summary import ACK_TEXTS, is_summary_message
from refold.errors import RefoldError
from refold.messages.model import Message, content_text, message_identity, wire_form
from refold.messages.validate import validate_messages
from refold.runtime.window import match_tail
from refold.store.base import Store

log = logging.getLogger(__name__)

EVENT = "rotation"


@dataclass(frozen=True)
class RotationInfo:
    carried: int  # the child's first rows that are the compacted view
    covers: int  # how many client conversation messages those rows stand for
    last_covered: str  # content hash of the last of them ("" when covers == 0)
    first: str = ""  # content hash of the conversation's first message ("": not recorded)


def _hash(message: Message) -> str:
    return message_identity(message, None)


def load_info(store: Store, session_id: str) -> RotationInfo | None:
    """The rotation record of ``session_id`` (None: not a rotated child)."""
    events = store.list_events(session_id, EVENT)
    if not events:
        return None
    payload = events[-1].payload
    try:
        return RotationInfo(int(payload["carried"]), int(payload["covers"]),
                            str(payload.get("last_covered") or ""),
                            str(payload.get("first") or ""))
    except (KeyError, TypeError, ValueError):
        log.warning("session %s: unreadable rotation record ignored", session_id)
        return None


def record_rotation(store: Store, parent_id: str, child_id: str, carried: int) -> None:
    """Note on ``child_id`` which client messages its ``carried`` first rows stand for, and
    carry the parent's task state (latest system prompt and todo events) to it."""
    before = load_info(store, parent_id) or RotationInfo(0, 0, "")
    rows = store.get_messages(parent_id)
    own = rows[before.carried:]  # the parent's rows that came from the client (or replies)
    covers = before.covers + len(own)
    last = _hash(own[-1].message) if own else before.last_covered
    first = before.first or (_hash(rows[0].message) if rows and not before.carried else "")
    store.append_event(child_id, EVENT, {"parent": parent_id, "carried": carried,
                                         "covers": covers, "last_covered": last,
                                         "first": first})
    carry_state_events(store, parent_id, child_id)


def rotate_session(store: Store, parent_id: str,
                   counts: Callable[[list[Message]], list[int | None]] | None = None) -> str:
    """Continue ``parent_id`` in a child session that starts with its compacted view (the
    latest checkpoint's projection); the parent is ended. Returns the child's id."""
    from refold.compaction import projection_messages  # lazy, as in ContextOps

    parent = store.get_session(parent_id)
    carried = [wire_form(m) for m in projection_messages(store.projection(parent.id), None)]
    title = store.next_lineage_title(parent.title) if parent.title else None
    child = store.create_session(title=title, source=parent.source, model=parent.model,
                                 parent_session_id=parent.id, link_kind="compaction",
                                 owner=parent.owner)
    store.append_messages(child.id, carried,
                          token_counts=counts(carried) if counts is not None else None)
    record_rotation(store, parent.id, child.id, len(carried))  # for proxy clients
    store.end_session(parent.id, "compaction")
    log.info("session %s rotated to %s after compaction", parent.id, child.id)
    return child.id


class Rotation:
    """One runtime's translator; caches the record and carried rows of its current session."""

    def __init__(self) -> None:
        self._session_id: str | None = None
        self._info: RotationInfo | None = None
        self._carried: list[Message] = []

    def _load(self, store: Store, session_id: str) -> RotationInfo | None:
        if session_id != self._session_id:
            info = load_info(store, session_id)
            carried = store.get_messages(session_id, limit=info.carried) if info else []
            self._session_id, self._info = session_id, info
            self._carried = [r.message for r in carried]
        return self._info

    def translate(self, store: Store, session_id: str, history: list[Message]) -> list[Message]:
        """``history`` as the child session stores it (unchanged for a non-rotated session)."""
        info = self._load(store, session_id)
        if info is None or info.covers == 0:
            return history
        lead = 0
        while lead < len(history) and isinstance(history[lead], dict) and \
                history[lead].get("role") in ("system", "developer"):
            lead += 1
        conversation = history[lead:]
        covered = info.covers
        if len(conversation) < covered or _client_hash(conversation[covered - 1]) != \
                info.last_covered or (info.first and conversation and _client_hash(
                    conversation[0]) != info.first):  # (a window: replies alike matched)
            found = window_in_child(self._carried, info.last_covered, conversation)
            if found is not None and (found[0] == 0 or match_tail(  # (0: all of the child)
                    store, session_id, found[1]) is not None):
                return [*history[:lead], *found[1]]
            log.info("session %s: history does not continue the rotated chain; plain sync",
                     session_id)
            return history
        return [*history[:lead], *self._carried, *conversation[covered:]]


def window_in_child(carried: list[Message], last_covered: str, window: list[Message]
                    ) -> tuple[int, list[Message]] | None:
    """A client's sliding window (after its system head) of a rotated conversation, in the
    child's terms: its messages up to the last one the rotation covered (``last_covered``)
    become the child's carried rows they stand for, from the first one the window still
    holds — a kept tail row, a kept head row, or else the summary — and the messages after
    it stay as sent: (the index of the first carried row it starts with, the window). None
    when the window does not hold the last covered message.

    The caller checks the result continues the child's tail (``match_tail``): so a window
    that was slid by a turn after a rotation goes on in the child, instead of continuing the
    ended parent's tail (which stored the child's messages a second time) or opening a
    conversation of its own holding a copy of the window."""
    if not last_covered or not carried:
        return None
    hashes = [_client_hash(m) for m in window]
    kept = [_hash(m) for m in carried]
    summary = next((i for i, m in enumerate(carried) if is_summary_message(m)), None)
    block_end = 0 if summary is None else summary + 1 + (
        summary + 1 < len(carried) and content_text(carried[summary + 1]) in ACK_TEXTS)
    rows = len(carried) - block_end  # the kept tail rows, after the summary block
    # the last message that is the covered one and that the kept rows line up before (a
    # reply said word for word again later, "Done.", is the covered one's text too)
    for end in range(len(hashes) - 1, -1, -1):
        if hashes[end] != last_covered:
            continue
        tail = 0  # how many of the kept rows end the window's covered part
        while tail <= end and tail < rows and hashes[end - tail] == kept[-1 - tail]:
            tail += 1
        if tail == end + 1:
            start = len(carried) - tail  # the window starts among the kept tail rows
        elif summary is None or tail < rows:
            continue  # it does not hold them all: not this conversation's stretch
        else:  # it starts before them: from the head rows it still holds, else the summary
            start = next((i for i in range(summary) if kept[i:summary] ==
                          hashes[:summary - i]), summary)
        return start, [*carried[start:], *window[end + 1:]]
    return None


def _client_hash(message: object) -> str | None:
    """The content hash of a client's message as it would be stored (text repaired); None for
    a message that is not valid (the plain sync then reports it)."""
    try:
        return _hash(validate_messages([message])[0])
    except RefoldError:
        return None


__all__ = ["EVENT", "Rotation", "RotationInfo", "load_info", "record_rotation",
           "rotate_session", "window_in_child"]
