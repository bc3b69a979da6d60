"""``assert_sent_as_client_sent``: what an upstream received through refold is what the client
sent ("the request is the truth", README), for your own tests of an agent behind the proxy or
the runtime.

The received messages must be the client's, in its order (a message the client sent twice, or a
reused tool-call id, is matched at its next place), ending with its last one, except
that a stretch refold compacted stands as its summary (``[CONTEXT SUMMARY`` …, and the short
acknowledgement that follows one where roles must alternate), an old tool output or a long
tool-call argument may be pruned (the same call id, shorter), and system messages (refold's
memory snapshot joins the system prompt) are not compared. Every tool result must answer a call
before it and every call must be answered. Anything else raises ``AssertionError`` naming the
message.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from refold.compaction.core import ACK

Message = dict[str, Any]


def _key(message: Message) -> tuple[Any, ...]:
    calls = [(c.get("id"), (c.get("function") or {}).get("name"),
              (c.get("function") or {}).get("arguments")) for c in message.get("tool_calls") or []]
    return (message.get("role"), json.dumps(message.get("content"), sort_keys=True),
            json.dumps(calls), message.get("tool_call_id"))


def _call_ids(message: Message) -> list[Any]:
    return [c.get("id") for c in message.get("tool_calls") or []]


def _place(values: list[Any], value: Any, at: int) -> int | None:
    """Where ``value`` is in ``values``: its first place after ``at`` (the place matched last:
    a client may send the same message twice, or reuse a tool-call id), else its first place
    (out of order), else None."""
    if value not in values:
        return None
    try:
        return values.index(value, at + 1)
    except ValueError:
        return values.index(value)


def assert_sent_as_client_sent(received: Sequence[Message], sent: Sequence[Message]) -> None:
    """Raise ``AssertionError`` unless ``received`` (what the upstream got, chat form) is the
    client's ``sent`` as described in the module docstring. A tool result in ``sent`` whose
    call is not in it (a sliding window that starts after the call) is not expected."""
    got = [m for m in received if m.get("role") not in ("system", "developer")]
    calls = {i for m in sent for i in _call_ids(m)}
    want = [m for m in sent if m.get("role") not in ("system", "developer")
            and (m.get("role") != "tool" or m.get("tool_call_id") in calls)]
    keys = [_key(m) for m in want]
    results = [m.get("tool_call_id") for m in want]
    call_ids = [_call_ids(m) for m in want]
    assert got and want and _key(got[-1]) == keys[-1], ("not the client's last message", got[-1:])
    at = -1
    for message in got:
        places = [_place(keys, _key(message), at)]
        if message.get("role") == "tool" and message.get("tool_call_id") is not None:
            places.append(_place(results, message["tool_call_id"], at))  # an old output, pruned
        if message.get("tool_calls"):
            places.append(_place(call_ids, _call_ids(message), at))  # long arguments, pruned
        found = [place for place in places if place is not None]
        if not found:
            content = message.get("content")
            assert str(content).startswith("[CONTEXT SUMMARY") or content in ACK.values(), (
                "a message the client did not send", message)
            continue
        now = min((place for place in found if place > at), default=min(found))
        assert now > at, ("out of the client's order", message)
        at = now
    pending: set[Any] = set()
    for message in got:
        if message.get("role") == "tool":
            assert message.get("tool_call_id") in pending, ("a result with no call", message)
            pending.discard(message.get("tool_call_id"))
        else:
            assert not pending, ("a call with no result", pending)
            pending = set(_call_ids(message))
