"""What a runtime keeps in the ledger about the request around its messages, as events: the
client's system prompt (``system_prompt``: resume and exports use it), the size of its tool
definitions (``tools``: ``refold context`` counts them) and the window the session is compacted
for (``window``: ``refold context`` measures against it). A proxied session stores no tool
definitions, so ``refold context`` showed "tools 0" for Claude Code sessions whose 24 tools
took ~16k of a 30k window; and a session served with ``--context-length 30000`` read "16.4% of
128,000 (compacts at 96,000)", the settings' window, not its own."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from refold.store import Store

TOOLS_EVENT = "tools"
WINDOW_EVENT = "window"


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


def note_request(store: Store, session_id: str, tools: Sequence[dict[str, Any]] | None,
                 count_tools: Any, context_length: int) -> tuple[int, int]:
    """Record the request's tools (``note_tools``, when it carries any) and the window the
    session is compacted for, each unless its latest record says the same; the caller's mark
    (how many tools, the window): it notes again only when that changes."""
    if tools:
        note_tools(store, session_id, tools, count_tools(tools))
    events = store.list_events(session_id, WINDOW_EVENT)
    if not (events and events[-1].payload.get("context_length") == context_length):
        store.append_event(session_id, WINDOW_EVENT, {"context_length": int(context_length)})
    return len(tools or ()), context_length


def recorded_window(store: Store, session_id: str) -> int | None:
    """The window the session was last compacted for (None: none recorded)."""
    events = store.list_events(session_id, WINDOW_EVENT)
    value = events[-1].payload.get("context_length") if events else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 \
        else None
