"""Provider-valid requests: every request the runtime builds passes the pairing checks.

A transcript can reach the runtime broken in ways a provider rejects: a process killed between
``record(assistant with tool_calls)`` and storing the tool results leaves calls unanswered; an
imported transcript may hold an orphan result or an unanswered call; a rewind or a branch can
cut between a call and its result. ``provider_valid`` runs a cheap O(n) check on every request
and, only when it finds a problem, ``refold.messages.repair``: unanswered calls get a clearly
marked ``[no result recorded]`` result, orphan results are dropped, results move right after
their call, an empty ``tool_calls`` list goes. The ledger is not changed (it keeps what
happened); the request says so in a warning.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Sequence
from itertools import repeat

from refold.messages.model import Message
from refold.messages.repair import repair


def needs_repair(messages: Sequence[Message]) -> bool:
    """True when a call lacks its result right after it, a result lacks its call, or an
    assistant message carries an empty ``tool_calls`` list."""
    if _no_tools(messages):
        return False  # (no call and no result: nothing to pair; checked at C speed)
    return _unpaired(messages)


def _unpaired(messages: Sequence[Message]) -> bool:
    """``needs_repair``'s walk over every message (its shortcut aside)."""
    pending: set[str] = set()
    for message in messages:
        role = message.get("role")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in pending:
                return True
            pending.discard(call_id)
            continue
        if pending:
            return True
        calls = message.get("tool_calls")
        if role == "assistant" and calls is not None:
            if not calls:
                return True
            pending = {c.get("id") for c in calls if isinstance(c, dict)}  # type: ignore[misc]
    return bool(pending)


def _no_tools(messages: Sequence[Message]) -> bool:
    """No message is a tool result or carries a ``tool_calls`` key (plain dicts only)."""
    if not set(map(type, messages)) <= {dict}:
        return False
    return "tool" not in list(map(dict.get, messages, repeat("role"))) \
        and not any(map(operator.contains, messages, repeat("tool_calls")))


def provider_valid(messages: list[Message]) -> tuple[list[Message], str | None]:
    """``messages`` repaired for the provider (unchanged when valid) and a warning saying what
    was repaired (None when nothing was)."""
    if not needs_repair(messages):
        return messages, None
    fixed = repair(messages)
    if not fixed.changes:
        return messages, None
    kinds = Counter(change.kind for change in fixed.changes)
    said = ", ".join(f"{n} {kind.replace('_', ' ')}" for kind, n in sorted(kinds.items()))
    return list(fixed.messages), f"transcript repaired for the provider: {said}"
