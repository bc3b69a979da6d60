"""An agent's own conversation id ties the sessions it makes together.

Agents send an id with every request of one conversation (``sessions.client_conversation``:
Claude Code's ``X-Claude-Code-Session-Id``, OpenCode's ``x-session-id``, Codex's
``session-id``). Besides the conversation itself, the same id rides on requests that open
otherwise, each of which a derived name makes a session of its own: the agent's side calls (a
title for the conversation: Claude Code's "Generate a concise, sentence-case title …", OpenCode's
"Generate a title for this conversation:", sent with no tools) and, after the agent's own
compaction, the conversation it goes on with ("This session is being continued from a previous
conversation …", OpenCode's "What did we do so far?"). Unlinked, they were sessions of their
own in ``sessions list`` (half of them title calls after a few OpenCode runs), and a search
found the user's prompt twice, the title call's copy first.

The id is noted on each session it creates (an event, ``AGENT_EVENT``; a side call's
``AGENT_SIDE_EVENT``), and a new session of an id already seen is linked to the newest
conversation of that id: a request without tools as a ``side`` call of it, one with tools as
its ``continuation``. A side call that came before its conversation's first request (agents send
both at once) is linked when the conversation's session is made. Search folds copies along a
lineage into one hit (``rank.collapse_copies``), so the title call's copy of a prompt is the
conversation's hit; ``resolve_resume`` follows ``compaction`` links only, so neither kind ever
takes a conversation's next turn elsewhere.
"""

from __future__ import annotations

import logging
from typing import Any

from refold.store.base import AGENT_EVENT, AGENT_SIDE_EVENT

log = logging.getLogger(__name__)

SIDE, CONTINUATION = "side", "continuation"


def is_side_call(body: dict[str, Any]) -> bool:
    """A request an agent makes beside its conversation: one with no tools to call."""
    return not body.get("tools")


def note_new(store: Any, owner: str, agent: str, session_id: str, side: bool) -> None:
    """Note ``agent`` on the session just made for it, linked as above (best effort: a link
    that cannot be made leaves the session as it is)."""
    try:
        found = store.sessions_of_agent(agent, owner=owner)
        conversations = [s for s, is_side in found if not is_side and s != session_id]
        if conversations:
            store.link_session(session_id, conversations[0], SIDE if side else CONTINUATION)
        if not side:  # side calls made before it are its own
            for other, is_side in found:
                if is_side and other != session_id:
                    store.link_session(other, session_id, SIDE)
        store.append_event(session_id, AGENT_SIDE_EVENT if side else AGENT_EVENT,
                           {"id": agent})
    except Exception:  # (a link is worth no failed turn)
        log.warning("session %s: the agent's conversation id was not noted", session_id,
                    exc_info=True)


def note_found(store: Any, owner: str, agent: str, session_id: str) -> None:
    """Note ``agent`` on a stored conversation it goes on with (begun before the agent sent an
    id, or under another one), so its side calls link there."""
    try:
        if not any(s == session_id for s, _ in store.sessions_of_agent(agent, owner=owner)):
            store.append_event(session_id, AGENT_EVENT, {"id": agent})
    except Exception:
        log.warning("session %s: the agent's conversation id was not noted", session_id,
                    exc_info=True)
