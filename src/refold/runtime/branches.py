"""Where a re-sent history goes in the ledger: append, branch, or rewind — never a lost tail.

A proxy client re-sends its whole conversation every call. Matched by message identity (each
identity chains the one before, so equal identities at position i mean equal prefixes) against
the stored active chain of a session, the history either

- **extends** it (the chain's tip is in the history, or the session is empty): the rest is
  appended — the common case;
- is a **prefix** of it (a retry, a regenerate, an agent restarted from scratch), or
- **diverges** from it (the client edited or dropped a message).

The last two are answered from what was sent, and the ledger keeps both conversations:

- ``diverge="branch"`` (a session the proxy derived from the conversation's opening, no
  ``X-Refold-Session``): the history continues in the *family* of that session — the first
  session and its ``branch`` children, recursively — on the one whose chain it extends; when
  none does, a new branch is forked at the longest common prefix (rows copied, task state
  carried: ``fork_with_state``), or, sharing nothing, a new child session. Another
  conversation's tail is never rewound;
- ``diverge="rewind"`` (a session the client named): the stored tail after the common prefix is
  rewound — reversibly (``Store.undo_rewind`` restores it) — and the history's rest appended.

``place`` returns the session the history is then synced into; after that sync the session's
active chain is exactly the history (by identity).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Literal

from refold.store.base import Store

log = logging.getLogger(__name__)

Diverge = Literal["branch", "rewind"]
MAX_FAMILY = 64  # sessions of one derived family looked at (the newest ones)


def _extends(store: Store, session_id: str, positions: dict[str, int]) -> int | None:
    """How many history messages ``session_id``'s chain covers when the history extends it
    (0 for an empty session), else None."""
    tip = store.view_tip(session_id).last_identity
    if tip is None:
        return 0
    index = positions.get(tip)
    return None if index is None else index + 1


def _common(store: Store, session_id: str, identities: Sequence[str]) -> tuple[int, int | None]:
    """(length of the common prefix, seq of the first stored row after it or None)."""
    rows = store.get_messages(session_id)
    keep = 0
    while keep < len(rows) and keep < len(identities) and rows[keep].identity == identities[keep]:
        keep += 1
    return keep, rows[keep].seq if keep < len(rows) else None


def family(store: Store, root_id: str) -> list[str]:
    """``root_id`` and its ``branch`` descendants (breadth first, bounded)."""
    out = [root_id]
    index = 0
    while index < len(out) and len(out) < MAX_FAMILY:
        out += [c.id for c in store.children(out[index]) if c.link_kind == "branch"]
        index += 1
    return out[:MAX_FAMILY]


def place(store: Store, root_id: str, current_id: str, identities: Sequence[str],
          diverge: Diverge) -> tuple[str, bool]:
    """The session the history with ``identities`` is synced into (see the module doc), and
    whether the ledger changed other than by appending: for "rewind" the divergent tail of
    ``current_id`` is rewound here; for "branch" another session may answer."""
    if not identities:
        return current_id, False
    positions = {identity: i for i, identity in enumerate(identities)}
    if _extends(store, current_id, positions) is not None:
        return current_id, False
    if diverge == "rewind":
        _, first_other = _common(store, current_id, identities)
        if first_other is not None:
            record = store.rewind(current_id, first_other, any_role=True)
            log.info("session %s: rewound %d messages the client no longer sends (rewind %s; "
                     "undo restores them)", current_id, record.count, record.id)
            return current_id, True
        return current_id, False
    members = family(store, root_id)
    covered = {sid: _extends(store, sid, positions) for sid in members if sid != current_id}
    extending = {sid: n for sid, n in covered.items() if n is not None}
    if extending:
        return max(extending, key=lambda sid: extending[sid]), True
    best, keep = current_id, -1
    for sid in [current_id, *members]:
        common, _ = _common(store, sid, identities)
        if common > keep:
            best, keep = sid, common
    return _branch(store, root_id, best, keep), True


def _branch(store: Store, root_id: str, parent_id: str, keep: int) -> str:
    """A new branch of ``parent_id`` holding its first ``keep`` active rows."""
    from refold.compaction.session import fork_with_state  # lazy, as in ContextOps

    if keep > 0:
        rows = store.get_messages(parent_id, limit=keep)
        child = fork_with_state(store, parent_id, rows[-1].seq, kind="branch")
    else:
        root = store.get_session(root_id)
        title = store.next_lineage_title(root.title) if root.title else None
        child = store.create_session(title=title, source=root.source, model=root.model,
                                     parent_session_id=root.id, link_kind="branch",
                                     owner=root.owner)
    log.info("session %s: a diverging conversation continues in its branch %s", parent_id,
             child.id)
    return child.id
