"""The ``memory`` tool: an OpenAI function schema and its handler, ready for an agent loop.

``MemoryTool.handle(arguments)`` takes the model's JSON arguments (a string or a dict) and
returns a JSON string — never raises for anything the model did. Every result tells the model
what to do next: successes are terminal ("do not repeat it"), errors carry usage, the current
entries (blocked ones as placeholders) or the candidates of an ambiguous match. After
``FAILURES_PER_TURN`` failed calls in one turn the tool tells the model to stop retrying and
refuses further calls until ``begin_turn()`` — an agent's retry loop in a live turn. A tool
made with ``stop_after=None`` (the background review's) has no stop: each call is judged on its
own. The system prompt's snapshot is never touched.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from refold.errors import InvalidInput, RefoldError
from refold.memory.actions import Guard
from refold.memory.approval import MemoryWriter
from refold.memory.entries import check_target
from refold.memory.ops import ACTIONS, MemoryOp, make_op

log = logging.getLogger(__name__)

TOOL_NAME = "memory"
FAILURES_PER_TURN = 3

_DESCRIPTION = (
    "Save durable facts to your persistent memory; it is shown to you at the start of every "
    "future session (not this one). target 'memory': your notes — environment facts, project "
    "conventions, tool quirks, lessons learned. target 'user': who the user is — preferences, "
    "communication style, habits. Save what will still matter next week; skip task progress and "
    "anything easy to rediscover. Never save secrets. Actions: add (content), replace (old_text = "
    "a short unique substring of the entry, content = the new text), remove (old_text), read "
    "(current entries and usage). Use 'operations' to apply several changes at once, "
    "all-or-nothing — e.g. remove stale entries and add a new one when memory is full."
)

_OP_SCHEMA = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": ["add", "replace", "remove"]},
        "content": {"type": "string"},
        "old_text": {"type": "string"},
    },
    "required": ["action"],
}


def memory_tool_schema() -> dict[str, Any]:
    """The OpenAI chat-completions tool definition for ``memory``."""
    return {
        "type": "function",
        "function": {
            "name": TOOL_NAME,
            "description": _DESCRIPTION,
            "parameters": {
                "type": "object",
                "properties": {
                    "action": {"type": "string", "enum": ["add", "replace", "remove", "read"]},
                    "target": {"type": "string", "enum": ["memory", "user"],
                               "description": "memory: your notes; user: the user's profile"},
                    "content": {"type": "string", "description": "the entry text (add/replace)"},
                    "old_text": {"type": "string",
                                 "description": "unique substring (or #id) of the entry to "
                                                "replace or remove"},
                    "operations": {"type": "array", "items": _OP_SCHEMA,
                                   "description": "several add/replace/remove, all-or-nothing"},
                },
                "required": ["target"],
            },
        },
    }


def error_payload(exc: RefoldError) -> dict[str, Any]:
    out: dict[str, Any] = {"success": False, "error": exc.message}
    if exc.hint:
        out["hint"] = exc.hint
    for key in ("usage", "current_entries", "candidates", "backup", "duplicate"):
        value = exc.details.get(key)
        if value:
            out["matches" if key == "candidates" else key] = value
    return out


class MemoryTool:
    """Dispatches ``memory`` tool calls to a ``MemoryWriter``; counts failures per turn.

    ``guard`` goes with every write (``MemoryWriter.submit``); ``stop_after``: the failed calls
    after which the tool refuses until ``begin_turn`` (None: never); ``last_error``: the error
    of the last call that failed, for a caller that reports why (None after a success)."""

    name = TOOL_NAME

    def __init__(self, writer: MemoryWriter, *, origin: str = "tool", guard: Guard | None = None,
                 stop_after: int | None = FAILURES_PER_TURN) -> None:
        self.writer = writer
        self.origin = origin
        self.guard = guard
        self.stop_after = stop_after
        self.failures = 0
        self.last_error: RefoldError | None = None

    def schema(self) -> dict[str, Any]:
        return memory_tool_schema()

    def begin_turn(self) -> None:
        self.failures = 0

    def handle(self, arguments: str | Mapping[str, Any] | None) -> str:
        if self._stopped():
            return self._json(self._stop())
        self.last_error = None
        try:
            result = self._dispatch(_parse(arguments))
        except RefoldError as exc:
            self.failures += 1
            self.last_error = exc
            # the message may quote entries: only the error class is logged above DEBUG
            log.info("memory tool call failed (%d this turn): %s", self.failures,
                     exc.__class__.__name__)
            log.debug("memory tool failure: %s", exc.message)
            payload = error_payload(exc)
            if self._stopped():
                payload.update(stop=True, note=self._stop()["error"])
            return self._json(payload)
        return self._json(result)

    def _stopped(self) -> bool:
        return self.stop_after is not None and self.failures >= self.stop_after

    def _stop(self) -> dict[str, Any]:
        return {"success": False, "stop": True,
                "error": f"{self.failures} memory calls failed this turn. Stop retrying memory "
                         "now: leave it unchanged, continue with your reply to the user, and "
                         "save the fact in a later turn."}

    def _dispatch(self, args: dict[str, Any]) -> dict[str, Any]:
        target = check_target(str(args.get("target") or "memory"))
        operations = args.get("operations")
        if operations:
            if not isinstance(operations, list):
                raise InvalidInput("operations must be a list of {action, content, old_text}")
            ops = [MemoryOp.from_dict(op) for op in operations]
        else:
            action = str(args.get("action") or "")
            if action == "read":
                return self._read(target)
            if action not in ACTIONS:  # (make_op's hint names only the writing actions)
                raise InvalidInput(f"unknown memory action {action!r}",
                                   hint="use add, replace, remove or read")
            ops = [make_op(action, content=args.get("content"), old_text=args.get("old_text"))]
        result = self.writer.submit(target, ops, origin=self.origin, guard=self.guard).to_dict()
        if not result.get("staged"):
            result["note"] = "Saved. This update is complete — do not repeat it."
        return result

    def _read(self, target: str) -> dict[str, Any]:
        view = self.writer.store.read(target)
        return {"success": True, "target": target, "usage": view.usage.describe(),
                "entries": [{"id": f"#{e.id}", "text": e.display()} for e in view.entries],
                "note": "This is the live state; the system prompt keeps the snapshot taken at "
                        "session start."}

    @staticmethod
    def _json(payload: Mapping[str, Any]) -> str:
        return json.dumps(payload, ensure_ascii=False)


def _parse(arguments: str | Mapping[str, Any] | None) -> dict[str, Any]:
    if arguments is None or arguments == "":
        return {}
    if isinstance(arguments, Mapping):
        return dict(arguments)
    try:
        parsed = json.loads(arguments)
    except ValueError as exc:
        raise InvalidInput(f"arguments are not valid JSON: {exc}",
                          hint="send a JSON object like {\"action\": \"add\", ...}") from exc
    if not isinstance(parsed, dict):
        raise InvalidInput("arguments must be a JSON object")
    return parsed
