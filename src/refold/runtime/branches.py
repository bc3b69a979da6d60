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
- ``diverge="rewind"`` (a session the client named): an edit — the history shares a start with
  the session (or with the family member it shares the longest start with) — rewinds that
  stored tail reversibly (``Store.undo_rewind`` restores it) and appends the history's rest;
  a history that goes back to a tail an edit rewound (the client undid the edit) brings those
  rows back (the edit's rows rewound in turn) instead of storing them twice. A
  history that shares nothing with any of them is another conversation under the same name
  (an agent's side calls: Claude Code's title and topic requests, a sub-agent's task): it is
  placed as in "branch", so it never rewinds the named conversation, and that conversation,
  when it comes back, extends its own chain again (each side call rewound all of it, which
  was then stored again: 106 rows for 26 messages in eight turns).

A turn the proxy stored but never answered (the upstream failed, so the client got an error
and no reply, or the client hung up before the reply) is marked (``note_unanswered``). A client that then goes on without it — agent
frameworks keep only the runs that succeeded (pydantic-ai's ``message_history``) — diverges
from the stored chain exactly there: when everything the session holds after the history's
common start is one agent run that ended so (its user message, the model's tool-calling steps
and their results, the last of them marked; no reply that answered the run), that tail is
rewound reversibly in either mode and the conversation goes on in its own session. (It forked
a branch holding a copy of the whole conversation before, one per failed run.) A retry of the
same history still extends the chain and stores nothing twice. The same holds for the reply to
a side call on the conversation — a request that ends with the model's own last reply and asks
for another (LangGraph's ``create_react_agent(response_format=…)`` asks for the structured
response so, and keeps it out of the messages it sends next): a history that goes on without
that one reply rewinds it instead of forking a branch at every turn.

``place`` returns the session the history is then synced into; after that sync the session's
active chain is exactly the history (by identity).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal

from refold.errors import Conflict, NotActive
from refold.messages.model import Message, chain_identities
from refold.runtime.chain import adopt_stored
from refold.store.base import Store, StoredMessage

if TYPE_CHECKING:
    from refold.runtime.window import WindowMatch

log = logging.getLogger(__name__)

Diverge = Literal["branch", "rewind"]
MAX_FAMILY = 64  # sessions of one derived family looked at (the newest ones)
PLACE_ATTEMPTS = 4  # placements of one history that other writers keep changing the session under
MAX_REWINDS = 32  # a session's rewinds looked at for rows a history goes back to (the newest)
UNANSWERED = "unanswered_turn"  # event: the stored chain ended here when a turn got no reply


def note_unanswered(store: Store, session_id: str) -> None:
    """Mark where ``session_id``'s chain ends now: a turn whose messages are stored got no
    reply (the upstream failed, or the client hung up first). See the module doc."""
    tip = store.view_tip(session_id)
    if tip.last_seq is not None and tip.last_identity is not None:
        store.append_event(session_id, UNANSWERED, {"seq": tip.last_seq,
                                                    "identity": tip.last_identity})


def _dropped_tail(store: Store, session_id: str, keep: int) -> bool:
    """Is everything after the first ``keep`` active rows of ``session_id`` what a client that
    goes on without it dropped, not another conversation (see the module doc): one agent run
    that ended unanswered (its last row marked by ``note_unanswered``, no user message after
    its first row, every reply in it a tool-calling step: a reply without calls answered the
    run, a later user message began another), or one reply to a request that ended with the
    model's own reply (a side call on the conversation, LangGraph's structured response)?"""
    rows = store.get_messages(session_id)
    tail = rows[keep:]
    if len(tail) == 1 and tail[0].role == "assistant" and rows[keep - 1].role == "assistant":
        return True
    if not tail or any(row.role == "user" for row in tail[1:]) or any(
            row.role == "assistant" and not row.message.get("tool_calls") for row in tail):
        return False
    last = tail[-1]
    return any(e.payload.get("seq") == last.seq and e.payload.get("identity") == last.identity
               for e in store.list_events(session_id, UNANSWERED))


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
    """``root_id`` and its ``branch`` descendants (breadth first), at most ``MAX_FAMILY``: the
    root and the newest others (a conversation goes on in a recent one)."""
    out = [root_id]
    index = 0
    while index < len(out) and len(out) < 8 * MAX_FAMILY:
        out += [c.id for c in store.children(out[index]) if c.link_kind == "branch"]
        index += 1
    return out if len(out) <= MAX_FAMILY else [root_id, *out[-(MAX_FAMILY - 1):]]


def place(store: Store, root_id: str, current_id: str, identities: Sequence[str],
          diverge: Diverge, window: Callable[[list[str]], str | None] | None = None
          ) -> tuple[str, bool]:
    """``_place``, again when another writer rewound a row it read before it rewound or forked
    there (two requests of one conversation at once on two workers: the second was a 400)."""
    for attempt in range(PLACE_ATTEMPTS):
        try:
            return _place(store, root_id, current_id, identities, diverge, window)
        except NotActive:
            if attempt == PLACE_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def _place(store: Store, root_id: str, current_id: str, identities: Sequence[str],
           diverge: Diverge, window: Callable[[list[str]], str | None] | None = None
           ) -> tuple[str, bool]:
    """The session the history with ``identities`` is synced into (see the module doc), and
    whether the ledger changed other than by appending: for "rewind" an edited tail is rewound
    here; another session of the family may answer. ``window``: asked, with the family's
    sessions, when the history extends none of them, before it is taken for an edit or
    another conversation; it returns the session it stored the history in as a sliding
    window of it (``refold.runtime.window``: an append, nothing left to sync), or None."""
    if not identities:
        return current_id, False
    positions = {identity: i for i, identity in enumerate(identities)}
    if _extends(store, current_id, positions) is not None:
        return current_id, False
    members = family(store, root_id)
    covered = {sid: _extends(store, sid, positions) for sid in members if sid != current_id}
    extending = {sid: n for sid, n in covered.items() if n is not None}
    if extending:
        return max(extending, key=lambda sid: extending[sid]), True
    slid = window(members) if window is not None else None
    if slid is not None:
        return slid, False
    best, keep, first_other = current_id, -1, None
    for sid in dict.fromkeys([current_id, *members]):
        common, other = _common(store, sid, identities)
        if common > keep:
            best, keep, first_other = sid, common, other
    if keep > 0 and first_other is not None and (
            diverge == "rewind" or _dropped_tail(store, best, keep)):
        if keep < len(identities) and _restore(store, best, identities, keep):
            return best, True
        record = store.rewind(best, first_other, any_role=True)
        log.info("session %s: rewound %d messages the client no longer sends (rewind %s; "
                 "undo restores them)", best, record.count, record.id)
        return best, True
    return _branch(store, root_id, best, max(keep, 0)), True


def restore_rewound(store: Store, session_id: str, history: list[Message]
                    ) -> tuple[int, int]:
    """Before syncing ``history`` into ``session_id``: when it goes on, after what the two
    share, with rows a rewind of the session holds (a transcript imported again after
    ``refold sessions rewind``), bring those rows back instead of storing copies of them (and
    counting their usage twice). How many rows came back, and how many active rows the
    restore rewound in turn (the session's tail after what the two share: the edit it held).
    (The history is hashed only when the session holds rewound rows.)"""
    if not history or not any(held.seqs for held in store.list_rewinds(session_id)):
        return 0, 0
    identities = chain_identities(history)
    keep, _ = _common(store, session_id, identities)
    if keep >= len(identities):
        return 0, 0
    before = len(store.get_messages(session_id))
    restored = _restore(store, session_id, identities, keep)
    if not restored:
        return 0, 0
    return restored, max(0, before + restored - len(store.get_messages(session_id)))


def _restore(store: Store, session_id: str, identities: Sequence[str], keep: int) -> int:
    """Bring back the rows an earlier rewind of ``session_id`` holds when the history goes on
    with them after its first ``keep`` messages (an edit the client undid: it re-sends the
    conversation as it was), instead of storing them again: ``Store.undo_rewind`` restores
    them and rewinds the tail after them in turn (the edit, itself reversible); restored rows
    the history leaves out are rewound again. How many rows it brought back; 0 when no rewind
    holds them (or one cannot be undone any more): the caller rewinds and appends."""
    want = identities[keep]
    for held in reversed(store.list_rewinds(session_id)[-MAX_REWINDS:]):
        if not held.seqs:
            continue  # undone already
        first = min(held.seqs)
        rows = store.get_messages(session_id, include_inactive=True, start_seq=first,
                                  end_seq=first)
        if not rows or rows[0].identity != want:
            continue
        try:
            store.undo_rewind(held.record.id)
        except Conflict:
            continue
        log.info("session %s: restored %d messages rewind %s held (the client went back to "
                 "them)", session_id, len(held.seqs), held.record.id)
        kept, other = _common(store, session_id, identities)
        if other is not None:
            store.rewind(session_id, other, any_role=True)
        return max(0, kept - keep)
    return 0


def _branch(store: Store, root_id: str, parent_id: str, keep: int) -> str:
    """A new branch of ``parent_id`` holding its first ``keep`` active rows."""
    from refold.compaction.session import fork_with_state  # lazy, as in ContextOps

    if keep > 0:
        rows = store.get_messages(parent_id, limit=keep)
        child = fork_with_state(store, parent_id, rows[-1].seq, kind="branch")
    else:
        root = store.get_session(root_id)
        for attempt in range(PLACE_ATTEMPTS):  # another process numbering a branch alike
            title = store.next_lineage_title(root.title) if root.title else None
            try:
                child = store.create_session(title=title, source=root.source, model=root.model,
                                             parent_session_id=root.id, link_kind="branch",
                                             owner=root.owner)
                break
            except Conflict:
                if title is None or attempt == PLACE_ATTEMPTS - 1:
                    raise
    log.info("session %s: a diverging conversation continues in its branch %s", parent_id,
             child.id)
    return child.id


def branch_at_stretch(store: Store, session_id: str, match: WindowMatch) -> str:
    """A branch of ``session_id`` that ends with the older stretch a sliding window re-sends
    (``refold.runtime.window.match_older``; rows copied up to there, as a diverging history's
    branch): the window, sent with no session named, then continues its tail."""
    from refold.compaction.session import fork_with_state  # lazy, as in ContextOps

    rows = store.get_messages(session_id, start_seq=match.start_seq, limit=match.overlap)
    child = fork_with_state(store, session_id, rows[-1].seq, kind="branch")
    log.info("session %s: a window re-sends messages %d..%d and not what followed them: it "
             "continues in the branch %s", session_id, match.start_seq, rows[-1].seq, child.id)
    return child.id


def adopt_in_family(store: Store, root_id: str, session_id: str, conversation: list[Message],
                    sent: dict[int, Message]) -> tuple[list[Message], list[str]]:
    """``conversation`` with the replies it re-sends in its own spelling spelled as stored
    (``adopt_stored``), and its identities: as ``session_id`` stored them, or, when the
    conversation then does not extend that session, as the first other session of the family
    of ``root_id`` whose chain it extends stored them. (Two conversations of one derived
    family whose turns interleave — two users opening alike — leave a runtime on the other
    one's branch: a client that re-spells replies, as pydantic-ai re-serializes a call's
    arguments, then diverged from that branch and forked a new branch holding a copy of its
    own conversation, at each such turn.) ``sent`` gets the cleared results of the adoption
    taken (``adopt_stored``)."""
    # adoption reads no further than the conversation goes, and a session with more
    # messages than it has is extended by none of its identities (each one chains all the
    # messages before it): a session's rows are read only as far as that
    limit = len(conversation) + 1
    mine: dict[int, Message] = {}
    own = store.get_messages(session_id, limit=limit)
    adopted = adopt_stored(conversation, [r.message for r in own], mine)
    identities = chain_identities(adopted)
    tip = store.view_tip(session_id).last_identity
    if tip is None or tip in identities:
        sent.update(mine)
        return adopted, identities
    # extended by none of them: adopted as the member it shares the longest start with,
    # which is where ``place`` branches it (a result the client cleared, adopted only as the
    # runtime's own session stored it, was stored again cleared in a branch forked before it)
    best = (_common_start(own, identities), adopted, identities, mine)
    for sid in family(store, root_id):
        if sid == session_id:
            continue
        rows = store.get_messages(sid, limit=limit)
        theirs: dict[int, Message] = {}
        other = adopt_stored(conversation, [r.message for r in rows], theirs)
        if other == adopted:
            continue  # spelled alike: its identities are the ones place() compares
        other_ids = chain_identities(other)
        other_tip = store.view_tip(sid).last_identity
        if len(rows) < limit and other_tip is not None and other_tip in other_ids:
            sent.update(theirs)  # (longer than the conversation: it cannot extend it)
            return other, other_ids
        common = _common_start(rows, other_ids)
        if common > best[0]:
            best = (common, other, other_ids, theirs)
    sent.update(best[3])
    return best[1], best[2]


def _common_start(rows: Sequence[StoredMessage], identities: Sequence[str]) -> int:
    """How many of the first rows have these identities."""
    count = 0
    for row, identity in zip(rows, identities, strict=False):
        if row.identity != identity:
            break
        count += 1
    return count

