"""``ViewCache``: the runtime's own copy of its session's projection, extended in O(new).

Reading ``Store.projection`` (and decoding every row) and counting the whole model view on
every turn makes a turn cost O(history). The runtime instead keeps the projection it last read
or wrote — the checkpoint, the active tail rows, the model view built from them (checkpoint
head and summary block, then the rows with the checkpoint's overrides) and the running sum of
the view's *uncalibrated* per-message token counts — and extends it with the rows it appends.

Invariants:
- the cache is used for a turn only when ``Store.view_tip`` (last active seq and identity, latest
  checkpoint id: one small query) equals what the cache ends on; any other writer — another
  process appending, rewinding, or compacting the session under its lease — changes one of the
  three, and the runtime falls back to the full read;
- rows are added only when they were appended with ``expect_last`` equal to the cache's tip
  (checked in the write transaction) and the first one's seq follows the cache's last seq, so
  nothing can have come in between; anything else drops the cache;
- a cache built from a full read is kept only when that read agrees with a ``view_tip`` read
  just before it (a writer in between makes it disagree, never the other way round);
- the token sum is of base (uncalibrated) counts, so a calibration update never invalidates it;
  the caller scales the total exactly as ``CalibratedCounter.count_messages`` does;
- ``snapshot`` hands planners deep copies and ``copies`` hands callers fresh dicts (nested
  containers deep-copied; the wire forms are computed once per row): the cached messages are
  never shared with code that might edit them.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Sequence
from itertools import repeat
from operator import itemgetter

from refold import _records as records
from refold._records import dataclass, field
from refold.messages.model import Message, copy_json, wire_form
from refold.runtime.chain import _NESTED
from refold.store.base import Checkpoint, Projection, StoredMessage, ViewTip

CountFn = Callable[[Message], int]


@dataclass
class ViewCache:
    session_id: str
    checkpoint: Checkpoint | None
    rows: list[StoredMessage]
    view: list[Message]  # projection_messages(projection, None), kept in step with ``rows``
    tokens: int  # sum of base counts over ``view``
    last_seq: int | None  # the session's last active row (may precede the tail: no rows)
    tip: str | None
    overrides: dict[int, Message] = field(default_factory=dict)
    trusted: bool = True  # False: built from a read another writer raced; use once, never keep
    wire: list[tuple[Message, bool]] = field(default_factory=list)  # (wire form, has nesting)
    window: int | None = None  # a sliding window's first seq (``Projection.window``)
    set_aside: int | None = None  # the latest checkpoint, not applied (``Projection.set_aside``)

    def __post_init__(self) -> None:
        if len(self.wire) != len(self.view):
            self.wire = [_wire(m) for m in self.view]
        self.nested = sum(nested for _, nested in self.wire)  # wire forms with nesting

    @classmethod
    def of(cls, projection: Projection, tip: ViewTip, count: CountFn) -> ViewCache:
        """The cache of a full read; ``trusted`` only when ``tip`` (read just before) agrees."""
        from refold.compaction import projection_messages  # lazy, as in ContextOps

        checkpoint = projection.checkpoint
        rows = list(projection.messages)
        trusted = projection.base_checkpoint_id == tip.checkpoint_id and (
            not rows or (rows[-1].seq, rows[-1].identity) == (tip.last_seq, tip.last_identity))
        details = checkpoint.details if checkpoint else {}
        overrides = {int(s): m for s, m in (details.get("overrides") or {}).items()}
        view = projection_messages(projection, None)
        return cls(projection.session_id, checkpoint, rows, view, sum(map(count, view)),
                   tip.last_seq, tip.last_identity, overrides, trusted,
                   window=projection.window, set_aside=projection.set_aside)

    @property
    def checkpoint_id(self) -> int | None:
        return self.checkpoint.id if self.checkpoint else self.set_aside

    def current(self, tip: ViewTip) -> bool:
        """Is the stored projection still exactly this one?"""
        return (tip.last_seq, tip.last_identity, tip.checkpoint_id) == (
            self.last_seq, self.tip, self.checkpoint_id)

    def extend(self, rows: Sequence[StoredMessage], count: CountFn) -> bool:
        """Add rows appended right after the tip; False when they do not follow it."""
        if not rows:
            return True
        if self.last_seq is None or rows[0].seq != self.last_seq + 1 or any(
                b.seq != a.seq + 1 for a, b in itertools.pairwise(rows)):
            return False
        for row in rows:
            message = dict(self.overrides.get(row.seq, row.message))
            self.rows.append(row)
            self.view.append(message)
            form = _wire(message)
            self.wire.append(form)
            self.nested += form[1]
            self.tokens += count(message)
        self.last_seq, self.tip = rows[-1].seq, rows[-1].identity
        return True

    def slide_to(self, start: int, count: CountFn) -> bool:
        """The view of a sliding window that now starts at row ``start`` (``SessionMirror``'s
        window fast path): the rows before it dropped, with their counts. Only for a view with
        no checkpoint at all (none applied, none set aside: then the view is the rows, one
        message each, as a full read from ``start`` gives them); False, unchanged, otherwise
        or when no row of the view is ``start``."""
        if self.checkpoint is not None or self.set_aside is not None or self.overrides \
                or len(self.rows) != len(self.view):
            return False
        cut = next((i for i, row in enumerate(self.rows) if row.seq == start), None)
        if cut is None:
            return False
        self.tokens -= sum(map(count, self.view[:cut]))
        del self.rows[:cut], self.view[:cut], self.wire[:cut]
        self.nested = sum(nested for _, nested in self.wire)
        self.window = start
        return True

    def copies(self) -> list[Message]:
        """The view in wire form, as fresh dicts the caller may edit (see ``detached``)."""
        if not self.nested:  # (the usual chat: no nesting anywhere, copied at C speed)
            return list(map(dict, map(_FORM, self.wire)))
        return [copy_json(w) if nested else dict(w) for w, nested in self.wire]

    def snapshot(self) -> Projection:
        """The projection, as ``Store.projection`` would return it, in copies for planners."""
        rows = [records.replace(r, message=copy.deepcopy(r.message)) for r in self.rows]
        return Projection(self.session_id, copy.deepcopy(self.checkpoint), rows,
                          window=self.window, set_aside=self.set_aside)


_FORM = itemgetter(0)


def _wire(message: Message) -> tuple[Message, bool]:
    form = wire_form(message)
    return form, any(map(isinstance, form.values(), repeat(_NESTED)))


def detached(message: Message) -> Message:
    """The message as handed to a caller: wire form, nested containers copied so editing them
    cannot alter the cached view (strings are immutable and shared)."""
    form, nested = _wire(message)
    return copy_json(form) if nested else form
