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

The id is noted on each session it creates (an event: ``AGENT_EVENT`` on a conversation,
``AGENT_SIDE_EVENT`` on a side call, ``AGENT_SUBAGENT_EVENT`` on a subagent's), and a new
session of an id already seen is linked to the newest conversation of that id: a request without
tools as a ``side`` call of it, one with tools as its ``continuation``, and the conversation of
a subagent it runs (Claude Code sends ``x-claude-code-agent-id`` beside the id) as a
``subagent`` of it. A side call that came before its conversation's first request (agents send
both at once) is linked when the conversation's session is made. Search folds copies along a
lineage into one hit and leaves a side call's other hits out beside its conversation's
(``rank.collapse_copies``); ``resolve_resume`` follows ``compaction`` links only, so none of
these ever takes a conversation's next turn elsewhere.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from refold.store.base import AGENT_EVENT, AGENT_SIDE_EVENT, AGENT_SUBAGENT_EVENT

log = logging.getLogger(__name__)

SIDE, SUBAGENT, CONTINUATION = "side", "subagent", "continuation"
# Claude Code's header on a subagent's requests (its Task/Agent tool), beside the conversation's
# own id: the subagent's conversation is one of the conversation's, not its continuation
SUBAGENT_HEADER = "x-claude-code-agent-id"


def link_of(headers: Mapping[str, str], body: dict[str, Any]) -> str:
    """How a new session of an agent's id links to the id's conversation: a ``subagent``'s
    (Claude Code names one), a ``side`` call (no tools to call) or its ``continuation``."""
    if headers.get(SUBAGENT_HEADER):
        return SUBAGENT
    return CONTINUATION if body.get("tools") else SIDE


def note_new(store: Any, owner: str, agent: str, session_id: str, link: str) -> None:
    """Note ``agent`` on the session just made for it, linked as above (best effort: a link
    that cannot be made leaves the session as it is)."""
    side = link != CONTINUATION  # (a subagent's session is no newest conversation either)
    try:
        found = store.sessions_of_agent(agent, owner=owner)
        conversations = [s for s, is_side in found if not is_side and s != session_id]
        if conversations:
            store.link_session(session_id, conversations[0], link)
        if not side:  # side calls made before it are its own
            for other, is_side in found:
                if is_side and other != session_id:
                    store.link_session(other, session_id, _kind(store, other))
        kind = {CONTINUATION: AGENT_EVENT, SUBAGENT: AGENT_SUBAGENT_EVENT}.get(
            link, AGENT_SIDE_EVENT)
        store.append_event(session_id, kind, {"id": agent})
    except Exception:  # (a link is worth no failed turn)
        log.warning("session %s: the agent's conversation id was not noted", session_id,
                    exc_info=True)


def _kind(store: Any, session_id: str) -> str:
    """The link a session noted beside the conversation takes: a subagent's
    (``AGENT_SUBAGENT_EVENT``) or a side call's."""
    return SUBAGENT if store.list_events(session_id, AGENT_SUBAGENT_EVENT) else SIDE


def note_found(store: Any, owner: str, agent: str, session_id: str) -> None:
    """Note ``agent`` on a stored conversation it goes on with (begun before the agent sent an
    id, or under another one), so its side calls link there."""
    try:
        if not any(s == session_id for s, _ in store.sessions_of_agent(agent, owner=owner)):
            store.append_event(session_id, AGENT_EVENT, {"id": agent})
    except Exception:
        log.warning("session %s: the agent's conversation id was not noted", session_id,
                    exc_info=True)
