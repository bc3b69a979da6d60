"""The runtime's link to the resolvers: a session's references, expanded in what is sent.

Where expansion happens, and why: the ledger keeps each user message exactly as its client sent
it (a proxy client re-sends its history as typed, and identity matching must keep working), and
the expansion is recorded beside it as a ``reference_expansion`` event (the message's seq, a
hash of its content, the expanded content, the warnings). Every request then sends the
expanded form in place of that message, byte-identical turn after turn and after a restart
(prompt caches stay warm; a file that changed on disk does not change what the model already
read). Only the newest user message is ever expanded afresh; a checkpoint that summarizes it
away drops its attachment with it.

Cost: the events are read once per runtime; a turn looks up the expanded seqs in the view (a
bisect each) and walks back to the newest user message. A turn that must expand (read files,
run git) raises ``WouldBlock`` in light mode so the proxy moves it to a worker thread.
"""

from __future__ import annotations

import bisect
import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any

from refold.errors import WouldBlock
from refold.messages.model import Message, content_text
from refold.references.expand import ReferenceExpander, expand_message
from refold.references.parse import parse_references
from refold.store.base import Store, StoredMessage

EVENT_KIND = "reference_expansion"


def content_key(message: Message) -> str:
    raw = json.dumps(message.get("content"), sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()[:16]


class ReferenceLink:
    """One session runtime's expansions (``apply`` per request, ``take_warnings`` per turn)."""

    def __init__(self, expander: ReferenceExpander, store: Store, *, context_length: int) -> None:
        self.expander = expander
        self.store = store
        self.context_length = context_length
        self._session_id: str | None = None
        self._memo: dict[int, dict[str, Any]] = {}  # seq -> event payload
        self._warnings: list[str] = []

    def apply(self, session_id: str, out: list[Message], rows: Sequence[StoredMessage], *,
              block: bool, count: Callable[[Message], int]) -> int:
        """Replace, in ``out`` (whose last ``len(rows)`` entries are ``rows``' messages), each
        referencing user message by its expansion; the change in ``count`` over ``out``."""
        self._load(session_id)
        delta = 0
        newest = self._newest_user(rows)
        if newest is not None and newest.seq not in self._memo:
            self._expand_newest(session_id, newest, block=block)
        if not self._memo:
            return 0  # (the usual turn: no expansion in this session)
        offset = len(out) - len(rows)
        seqs = [row.seq for row in rows]
        for seq, payload in self._memo.items():
            index = bisect.bisect_left(seqs, seq)
            if index == len(seqs) or seqs[index] != seq:
                continue
            original = rows[index].message
            if payload.get("key") != content_key(original):
                continue  # not the message it was made for
            expanded = {**out[offset + index], "content": payload["content"]}
            delta += count(expanded) - count(out[offset + index])
            out[offset + index] = expanded
            if newest is not None and seq == newest.seq and rows[-1] is newest:
                # the request that opens the turn (and any retry of it) reports them
                self._warnings.extend(payload.get("warnings") or [])
        return delta

    def take_warnings(self) -> list[str]:
        warnings, self._warnings = self._warnings, []
        return warnings

    # -- internals -------------------------------------------------------------------------------
    def _load(self, session_id: str) -> None:
        if session_id == self._session_id:
            return
        memo: dict[int, dict[str, Any]] = {}
        for event in self.store.list_events(session_id, EVENT_KIND):
            seq = event.payload.get("seq")
            if isinstance(seq, int) and "content" in event.payload:
                memo[seq] = dict(event.payload)  # latest write wins
        self._memo = memo
        self._session_id = session_id

    @staticmethod
    def _newest_user(rows: Sequence[StoredMessage]) -> StoredMessage | None:
        for row in reversed(rows):
            if row.role == "user":
                return row
        return None

    def _expand_newest(self, session_id: str, row: StoredMessage, *, block: bool) -> None:
        if not parse_references(content_text(row.message)):
            return
        if not block:
            raise WouldBlock("expanding references reads files: run this turn on a worker")
        expanded, expansion = expand_message(self.expander, row.message,
                                             context_length=self.context_length,
                                             current_session_id=session_id)
        if expansion is None:
            return
        payload = {"seq": row.seq, "key": content_key(row.message),
                   "content": expanded.get("content"), "warnings": list(expansion.warnings)}
        self.store.append_event(session_id, EVENT_KIND, payload)
        self._memo[row.seq] = payload


__all__ = ["EVENT_KIND", "ReferenceLink", "content_key"]
