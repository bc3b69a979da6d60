"""What a runtime keeps in the ledger about the request around its messages, as events: the
client's system prompt (``system_prompt``: resume and exports use it) and the size of its tool
definitions (``tools``: ``refold context`` counts them). A proxied session stores no tool
definitions, so ``refold context`` showed "tools 0" for Claude Code sessions whose 24 tools
took ~16k of a 30k window."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from refold.store import Store

TOOLS_EVENT = "tools"


def note_system_prompt(store: Store, session_id: str, system: str) -> None:
    """Record ``system`` unless it is the session's latest recorded system prompt."""
    events = store.list_events(session_id, "system_prompt")
    if not (events and events[-1].payload.get("text") == system):
        store.append_event(session_id, "system_prompt", {"text": system})


def note_tools(store: Store, session_id: str, tools: Sequence[dict[str, Any]],
               tokens: int) -> int:
    """Record that the session's requests carry ``tools`` (``tokens`` by the session's
    counter) unless its latest record says the same; how many tools (the caller's mark: it
    notes again only when that changes, so a steady turn reads nothing)."""
    names = sorted(str((t.get("function") or t).get("name") or "") for t in tools
                   if isinstance(t, dict))
    payload = {"count": len(tools), "tokens": int(tokens), "names": names[:200]}
    events = store.list_events(session_id, TOOLS_EVENT)
    if not (events and events[-1].payload == payload):
        store.append_event(session_id, TOOLS_EVENT, payload)
    return len(tools)


def recorded_tools_tokens(store: Store, session_id: str) -> int | None:
    """The tokens of the tool definitions the session's requests last carried (None: none
    recorded)."""
    events = store.list_events(session_id, TOOLS_EVENT)
    tokens = events[-1].payload.get("tokens") if events else None
    return tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None
