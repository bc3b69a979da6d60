"""Backend-neutral rules every ``Store`` enforces, so SQLite and PostgreSQL cannot drift apart.

Each function is pure: the backend reads what it needs inside its own transaction and asks here
whether the operation is allowed. A refusal is a ``RefoldError`` naming what to do instead.
"""

from __future__ import annotations

from collections.abc import Iterable

from refold.errors import Conflict, InvalidInput
from refold.messages.model import message_identity
from refold.store.base import (
    Checkpoint,
    CheckpointBase,
    CheckpointDraft,
    RewindRecord,
    StoredMessage,
)

FORK_KINDS = ("fork", "branch")


def check_checkpoint_draft(draft: CheckpointDraft) -> None:
    """A checkpoint replaces ``first..last`` and keeps the tail from ``tail_start_seq`` on."""
    if not (1 <= draft.first_seq <= draft.last_seq < draft.tail_start_seq):
        raise InvalidInput(
            f"checkpoint range is invalid (first {draft.first_seq}, last {draft.last_seq}, "
            f"tail start {draft.tail_start_seq}); need 1 <= first <= last < tail start")
    if not isinstance(draft.summary, str):
        raise InvalidInput("a checkpoint summary must be text")


def check_checkpoint_commit(session_id: str, draft: CheckpointDraft,
                            latest: Checkpoint | None, expect: CheckpointBase | None,
                            tip_active: bool) -> None:
    """Conflict unless ``draft`` may land now (read in the insert's own transaction).

    ``latest`` is the session's latest checkpoint, ``tip_active`` whether the row
    ``expect.tip_seq`` is still active. A checkpoint moves the view forward only; with
    ``expect`` the view must still be the one the draft was planned from (compare-and-set).
    """
    if expect is not None:
        latest_id = latest.id if latest else None
        if latest_id != expect.checkpoint_id:
            raise Conflict(f"session {session_id} was compacted meanwhile (checkpoint "
                           f"{latest_id}, planned from {expect.checkpoint_id}); plan dropped",
                           hint="plan again from the current view", reason="stale")
        if expect.tip_seq is not None and not tip_active:
            raise Conflict(f"session {session_id} was rewound past message {expect.tip_seq} "
                           "after the plan was made; plan dropped",
                           hint="plan again from the current view", reason="stale")
    if latest is not None and draft.tail_start_seq <= latest.tail_start_seq:
        raise Conflict(f"checkpoint would not move session {session_id}'s view forward (tail "
                       f"start {draft.tail_start_seq}, latest checkpoint keeps from "
                       f"{latest.tail_start_seq})", hint="plan again from the current view",
                       reason="backwards")


def check_fork_kind(kind: str) -> None:
    if kind not in FORK_KINDS:
        raise InvalidInput(f"unknown fork kind {kind!r}", hint="use fork or branch")


def restore_point(record: RewindRecord, restored: StoredMessage,
                  before: Iterable[tuple[int, str]]) -> int:
    """The seq of the active row the rewound rows followed (0: the session's start), from
    ``before``, the active rows before the first rewound one (``restored``) as (seq, identity),
    newest first. Active rows after that point (an edit's new tail, or the tail an undo put
    back) are rewound in turn when the rows are restored (``RewindRecord.replaced_by``), so
    an undo is reversible too. Conflict when the row they followed is no longer active."""
    for seq, identity in before:
        if message_identity(restored.message, identity) == restored.identity:
            return seq
    if message_identity(restored.message, None) == restored.identity:
        return 0
    raise Conflict(f"rewind {record.id} cannot be undone: session {record.session_id} "
                   "changed before it (the messages it followed were rewound)",
                   hint=f"the rewound messages are kept: `refold sessions show "
                            f"{record.session_id} --all` shows them, `refold sessions export "
                            f"{record.session_id} --archived` writes them out")
