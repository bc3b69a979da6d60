"""A client's sliding window: a history that re-sends the end of a stored conversation.

Many agent frameworks send the model their system message and only the last N messages
(LangChain's ``trim_messages(..., include_system=True)``, token-budgeted memories, chat UIs'
"last N turns"). Each such request starts somewhere new, so matching histories by their start
(the derived session name, the identity chain) took every slid window for a conversation of its
own, its messages stored again. A history continues a stored session by its window when:

- its messages after the system head *begin* with a stretch equal to the session's active
  *tail* — by the identity the proxy matches messages by anywhere else (a reply re-sent in
  another spelling, a tool result re-sent cleared, a reply of several calls re-sent split are
  the stored ones: ``refold.runtime.chain``) — of at least ``MIN_OVERLAP`` messages, at least
  one of them the model's (an assistant message), or of the tail's last reply alone when it
  is ``distinctive`` (it calls tools, or its text is long);
- its system text is the session's recorded system prompt, when it has one (a window without
  a system message may have let it slide out with the oldest messages: pydantic-ai's history
  processors keep the last N messages, and its system prompt is in the first);
- the session belongs to the same tenant (``Store.window_candidates`` looks within one owner).

A window whose stretch equals an older part of the session (not its tail) is an edit and goes
the way an edit goes. The window's rest is appended after the tail, so each message is stored
once, and what goes upstream is still the window alone: the runtime's view starts at the
stored row the window's first message is (``SessionMirror.window``), its tokens counted from
there, and a checkpoint is applied only while the window starts inside the stretch it stands
for (``refold.runtime.mirror.slid_checkpoint``), its summary in place of that stretch.

Finding candidates costs one indexed lookup (``Store.window_candidates``: assistant rows by the
start of their text), and only for a request that would otherwise open a new conversation; the
session's runtime checks the tail again when it places the history (another writer may have
moved it meanwhile).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from refold._records import dataclass
from refold.messages.model import Message, chain_identities, content_text, wire_form
from refold.runtime.chain import adopt_stored, identity_core, resent, resent_result, same
from refold.store.base import Store, StoredMessage

MIN_OVERLAP = 2  # messages the window's start shares with the stored tail, at least...
DISTINCTIVE_CHARS = 200  # ...or one: the tail's reply, when it is this long or calls tools


def distinctive(message: Message) -> bool:
    """Is ``message`` a reply no other conversation is likely to end with: one that calls
    tools (their ids are the provider's, unique) or whose text is at least
    ``DISTINCTIVE_CHARS`` long? A window that shares only its first message with a stored tail
    continues it when that message is such a reply (trimmers that cut at any message, as
    LangChain's ``trim_messages`` without ``start_on``, often start the window at the last
    reply)."""
    if message.get("role") != "assistant":
        return False
    calls = message.get("tool_calls")
    if isinstance(calls, list) and calls and all(
            isinstance(c, dict) and isinstance(c.get("id"), str) and len(c["id"]) >= 8
            for c in calls):
        return True
    return len(content_text(message).strip()) >= DISTINCTIVE_CHARS
LOOKUP_REPLIES = 8  # the window's last replies looked up (the session's last reply is one)
MAX_CANDIDATES = 16
LOOK_BACK = 32  # rows before the window's length that an edited window may start at (``match_older``)


@dataclass(frozen=True)
class WindowMatch:
    """How a window continues ``session_id``."""

    session_id: str
    start_seq: int  # the stored row the window's first message is
    overlap: int  # how many of the window's first messages are the stored tail
    conversation: list[Message]  # the window after its system head, replies spelled as stored
    sent: dict[int, Message]  # results the client cleared, as sent (index in ``conversation``)
    tip: str  # identity of the stored tail's last row (what comes next is appended after it)
    updated: float  # when that row was stored


def system_of(history: Sequence[Any]) -> tuple[str | None, list[Message]] | None:
    """(the system text, the conversation after the system head) of an unchecked request's
    messages, or None when one of them is not a message object."""
    if not all(isinstance(m, dict) for m in history):
        return None
    index = 0
    parts: list[str] = []
    while index < len(history) and history[index].get("role") in ("system", "developer"):
        parts.append(content_text(history[index]))
        index += 1
    system = "\n\n".join(p for p in parts if p)
    return system or None, [wire_form(m) for m in history[index:]]


def tail_rows(store: Store, session_id: str, count: int) -> list[StoredMessage]:
    """The last ``count`` active rows of the session (all of them when it has fewer)."""
    last = store.view_tip(session_id).last_seq
    if last is None or count <= 0:
        return []
    span = count
    while True:
        start = max(1, last - span + 1)
        rows = store.get_messages(session_id, start_seq=start)
        if len(rows) >= count or start == 1:
            return rows[-count:]
        span *= 2  # rewound rows in between: look further back


def match_tail(store: Store, session_id: str, conversation: list[Message]
               ) -> WindowMatch | None:
    """How ``conversation`` (wire form, after its system head) continues the session's active
    tail as a sliding window, or None (see the module doc; the system text is the caller's to
    compare). The longest stretch wins."""
    if len(conversation) < MIN_OVERLAP:
        return None
    rows = tail_rows(store, session_id, len(conversation) + 1)
    total = len(rows)
    first = identity_core(conversation[0])
    for overlap in range(min(len(conversation), total), 0, -1):
        start = total - overlap
        if start == 0 and total <= len(conversation):
            continue  # the window starts at the session's start: an ordinary history
        core = identity_core(rows[start].message)
        if not (same(first, core) or resent(first, core) or resent_result(first, core)):
            continue
        sent: dict[int, Message] = {}
        adopted = adopt_stored(list(conversation), [r.message for r in rows[start:]], sent)
        stretch = adopted[:overlap]
        if len(stretch) < overlap or not any(m.get("role") == "assistant" for m in stretch):
            continue
        if overlap < MIN_OVERLAP and not distinctive(stretch[0]):
            continue  # one short reply ("Done.") may end another conversation as well
        previous = rows[start - 1].identity if start > 0 else None
        if chain_identities(stretch, previous)[-1] != rows[-1].identity:
            continue
        return WindowMatch(session_id, rows[start].seq, overlap, adopted, sent,
                           rows[-1].identity, rows[-1].created_at)
    return None


def match_older(store: Store, session_id: str, conversation: list[Message]
                ) -> tuple[WindowMatch, int] | None:
    """How ``conversation`` (wire form, after its system head) re-sends an *older* stretch of
    the session — not its tail — as a sliding window that was regenerated or edited: its
    first ``overlap`` messages (at least ``MIN_OVERLAP``, one of them the model's) are stored
    rows ``start_seq``… by identity, and rows follow them that the window does not carry (the
    answer regenerated, the question edited and its answer). (the match, whose ``tip`` is the
    stretch's last row, and the seq of the first row after the stretch), or None. Read only
    for a named session's window that continues no tail (``WindowSlides.slide``): the
    latest, then longest, stretch wins. Rows up to ``LOOK_BACK`` before the window's length
    from the tail are looked at."""
    if len(conversation) < MIN_OVERLAP:
        return None
    rows = tail_rows(store, session_id, len(conversation) + LOOK_BACK)
    total = len(rows)
    first = identity_core(conversation[0])
    for start in range(total - MIN_OVERLAP - 1, -1, -1):
        core = identity_core(rows[start].message)
        if not (same(first, core) or resent(first, core) or resent_result(first, core)):
            continue
        stored = rows[start:]
        sent: dict[int, Message] = {}
        adopted = adopt_stored(list(conversation), [r.message for r in stored], sent)
        previous = rows[start - 1].identity if start > 0 else None
        overlap = 0
        for identity, row in zip(chain_identities(adopted, previous), stored, strict=False):
            if identity != row.identity:
                break
            overlap += 1
        if overlap < MIN_OVERLAP or start + overlap >= total or not any(
                m.get("role") == "assistant" for m in adopted[:overlap]):
            continue
        if start == 0 and len(rows) < len(conversation) + LOOK_BACK:
            continue  # the window starts at the session's start: an ordinary history's edit
        sent = {}  # adopted again along the stretch only: the rest is stored as sent
        adopted = adopt_stored(list(conversation), [r.message for r in stored[:overlap]], sent)
        last = rows[start + overlap - 1]
        return (WindowMatch(session_id, rows[start].seq, overlap, adopted, sent, last.identity,
                            last.created_at), rows[start + overlap].seq)
    return None


def place_window(store: Store, sessions: Sequence[str],
                 prompt_of: Callable[[str], str | None], window: list[Message],
                 system: str | None, *, older: bool
                 ) -> tuple[str, WindowMatch, int | None] | None:
    """Which of ``sessions`` (tried in order) ``window`` (wire form, after its system head)
    continues as a sliding window: (its id, the match, None) for the first whose tail it
    continues; else, with ``older`` (a session the client named), (its id, the match, the
    seq to rewind from) for the first whose older stretch it re-sends (``match_older``: an
    answer regenerated, a question edited); None when neither. A session is a candidate when
    its system prompt (``prompt_of``) is the window's, or the window has none (it may have
    slid out with the oldest messages)."""
    if len(window) < MIN_OVERLAP or not any(m.get("role") == "assistant" for m in window):
        return None
    alike: list[str] = []
    for session_id in sessions:
        if (system or None) is not None and system != (prompt_of(session_id) or None):
            continue
        alike.append(session_id)
        match = match_tail(store, session_id, window)
        if match is not None:
            return session_id, match, None
    if older:
        for session_id in alike:
            found = match_older(store, session_id, window)
            if found is not None:
                return session_id, found[0], found[1]
    return None


def opens_a_member(store: Store, window: list[Message], members: Sequence[str]) -> bool:
    """Does ``window`` start with the first stored message of one of ``members`` (then it is
    an ordinary history, not a window)?"""
    if not window:
        return False
    first = chain_identities(window[:1])[0]
    return any(rows and rows[0].identity == first
               for rows in (store.get_messages(m, limit=1) for m in members))


def find_window(store: Store, owner: str, history: Sequence[Any]) -> WindowMatch | None:
    """The stored session of ``owner`` that ``history`` (a request's messages, unchecked)
    continues as a sliding window — the most recently updated one when several do — else the
    one whose older stretch it re-sends (``match_older``: the window sent again, or its last
    answer regenerated; the session's runtime branches there, or rewinds a named one), or
    None. One indexed lookup, then each candidate's tail and system prompt are read."""
    from refold.compaction.session import recorded_system_prompt  # lazy, as in ContextOps

    split = system_of(history)
    if split is None:
        return None
    system, conversation = split
    replies = [m for m in conversation if m.get("role") == "assistant"][-LOOKUP_REPLIES:]
    if len(conversation) < MIN_OVERLAP or not replies:
        return None
    looked_up = [spelled for reply in replies for spelled in (reply, *respelled(reply))]
    best: WindowMatch | None = None
    alike: list[str] = []
    for session_id in store.window_candidates(owner, looked_up, limit=MAX_CANDIDATES):
        if system is not None and (recorded_system_prompt(store, session_id) or None) != system:
            continue  # (a window without one: its system prompt slid out with the rest)
        alike.append(session_id)
        match = match_tail(store, session_id, conversation) or _match_child(
            store, session_id, conversation)
        if match is not None and (best is None or match.updated > best.updated):
            best = match
    if best is None:  # a window sent again, or regenerated: an older stretch of one of them
        for session_id in alike:
            older = match_older(store, session_id, conversation)
            if older is not None and (best is None or older[0].updated > best.updated):
                best = older[0]
    return best


def _match_child(store: Store, session_id: str, conversation: list[Message]
                 ) -> WindowMatch | None:
    """``match_tail`` of the window in a rotation child's terms (its covered stretch as the
    child's carried rows: ``refold.runtime.rotation.window_in_child``), or None."""
    from refold.runtime.rotation import load_info, window_in_child  # (it imports this module)

    info = load_info(store, session_id)
    if info is None or not info.carried:
        return None
    carried = [r.message for r in store.get_messages(session_id, limit=info.carried)]
    found = window_in_child(carried, info.last_covered, conversation)
    if found is None:
        return None
    start, window = found
    return match_tail(store, session_id, window) if start else match_whole(
        store, session_id, window)


def match_whole(store: Store, session_id: str, conversation: list[Message]
                ) -> WindowMatch | None:
    """``conversation`` as a continuation of the *whole* active session (its rows, then new
    messages), as a ``WindowMatch`` of overlap = the session's length; None when it is not."""
    rows = tail_rows(store, session_id, len(conversation) + 1)
    if not rows or len(rows) > len(conversation):
        return None  # (fewer rows than asked for: they are all the session's active rows)
    sent: dict[int, Message] = {}
    adopted = adopt_stored(list(conversation), [r.message for r in rows], sent)
    if chain_identities(adopted[:len(rows)])[-1] != rows[-1].identity:
        return None
    return WindowMatch(session_id, rows[0].seq, len(rows), adopted, sent, rows[-1].identity,
                       rows[-1].created_at)


# how clients and providers spell a call's arguments: the stored reply is the provider's
# spelling, and clients re-serialize it (pydantic-ai: compact; Python's default: spaced)
_SPELLINGS: tuple[Callable[[Any], str], ...] = (
    lambda a: json.dumps(a),
    lambda a: json.dumps(a, separators=(",", ":")),
    lambda a: json.dumps(a, ensure_ascii=False),
    lambda a: json.dumps(a, separators=(",", ":"), ensure_ascii=False),
)


def respelled(reply: Message) -> list[Message]:
    """``reply`` with its calls' arguments in the other common JSON spellings (none when it
    makes no call with JSON arguments): the index that finds window candidates holds the
    start of the stored text, arguments as the provider spelled them, and a client that
    re-serializes a call would otherwise find nothing when the call is the window's only
    reply."""
    calls = reply.get("tool_calls")
    if not isinstance(calls, list) or not calls:
        return []
    parsed: list[Any] = []
    for call in calls:
        fn = call.get("function") if isinstance(call, dict) else None
        arguments = fn.get("arguments") if isinstance(fn, dict) else None
        try:
            parsed.append(json.loads(arguments) if isinstance(arguments, str) else None)
        except ValueError:
            parsed.append(None)
    if all(p is None for p in parsed):
        return []
    out = []
    for spell in _SPELLINGS:
        spelled = []
        for call, args in zip(calls, parsed, strict=True):
            if args is None:
                spelled.append(call)
            else:
                spelled.append({**call, "function": {**call["function"],
                                                     "arguments": spell(args)}})
        out.append({**reply, "tool_calls": spelled})
    return out
