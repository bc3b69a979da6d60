"""A tool registry: OpenAI function schemas, and dispatch of a model's tool_call to a handler.

A handler takes the decoded arguments and returns the tool result as text (usually JSON). The
registry never raises on what a model sends: unknown tools, arguments that are not a JSON object
and ``RefoldError``s from handlers all come back as a tool message whose content says what went
wrong, so the model can correct itself. Bugs (any other exception) still propagate.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from typing import Any

from refold._records import dataclass
from refold.errors import InvalidInput, RefoldError
from refold.messages.model import Message, as_plain

log = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any]], str]


@dataclass(frozen=True)
class Tool:
    """One tool: its name, its OpenAI function schema and its handler."""

    name: str
    description: str
    parameters: dict[str, Any]
    handler: Handler
    # tells whether a result the handler returned (rather than raised) reports a failure
    failed: Callable[[str], bool] | None = None

    @property
    def schema(self) -> dict[str, Any]:
        return {"type": "function", "function": {
            "name": self.name, "description": self.description, "parameters": self.parameters}}


@dataclass(frozen=True)
class ToolResult:
    text: str
    is_error: bool


def to_json(value: Any) -> str:
    """Compact JSON for tool results; non-ASCII kept (CJK costs fewer tokens unescaped)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def error_result(message: str) -> str:
    return to_json({"error": message})


class ToolRegistry:
    """Tools by name; ``dispatch`` turns an assistant tool_call into the matching tool message."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} is already registered")
        self._tools[tool.name] = tool

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def schemas(self) -> list[dict[str, Any]]:
        return [tool.schema for tool in self._tools.values()]

    def run(self, name: str, arguments: str | dict[str, Any] | None) -> ToolResult:
        """Run tool ``name`` with raw or decoded arguments; errors come back as results."""
        tool = self._tools.get(name)
        if tool is None:
            return ToolResult(error_result(
                f"unknown tool {name!r}; available: {', '.join(self.names)}"), True)
        args = _decode_arguments(arguments)
        if isinstance(args, str):
            return ToolResult(error_result(args), True)
        try:
            text = tool.handler(args)
            return ToolResult(text, bool(tool.failed and tool.failed(text)))
        except RefoldError as exc:
            log.debug("tool %s refused: %s", name, exc)
            return ToolResult(error_result(str(exc)), True)

    def call(self, name: str, arguments: str | dict[str, Any] | None) -> str:
        """The result text of ``run``."""
        return self.run(name, arguments).text

    def dispatch(self, tool_call: dict[str, Any]) -> Message:
        """The ``role: tool`` message answering ``tool_call`` (a dict, or the SDK's tool call
        object: ``message.tool_calls[i]``)."""
        tool_call = as_plain(tool_call)
        if not isinstance(tool_call, dict):
            raise InvalidInput("a tool call must be an object with 'id' and 'function', not "
                               f"{type(tool_call).__name__}")
        fn = tool_call.get("function") or {}
        if not isinstance(fn, dict):
            fn = {}
        result = self.call(str(fn.get("name") or ""), fn.get("arguments"))
        return {"role": "tool", "tool_call_id": str(tool_call.get("id") or ""), "content": result}

    def dispatch_all(self, assistant: Message) -> list[Message]:
        """Tool messages for every tool_call of an assistant message (a dict, or the SDK's
        message object), in order."""
        assistant = as_plain(assistant)
        if not isinstance(assistant, dict):
            raise InvalidInput("expected an assistant message, not "
                               f"{type(assistant).__name__}")
        return [self.dispatch(call) for call in assistant.get("tool_calls") or []]


def _decode_arguments(arguments: str | dict[str, Any] | None) -> dict[str, Any] | str:
    """The arguments as a dict, or a string explaining why they cannot be used."""
    if arguments is None or arguments == "":
        return {}
    if isinstance(arguments, dict):
        return arguments
    try:
        value = json.loads(arguments)
    except (TypeError, ValueError) as exc:
        return f"arguments are not valid JSON ({exc}); send a JSON object"
    if not isinstance(value, dict):
        return "arguments must be a JSON object"
    return value


def arg_str(args: dict[str, Any], name: str, default: str | None = None) -> str | None:
    value = args.get(name, default)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInput(f"'{name}' must be a string")
    return value


def arg_int(args: dict[str, Any], name: str, default: int, *, lo: int, hi: int) -> int:
    value = args.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise InvalidInput(f"'{name}' must be an integer")
    try:
        number = int(value)
    except (ValueError, OverflowError) as exc:  # OverflowError: inf (JSON's 1e400, Infinity)
        raise InvalidInput(f"'{name}' must be an integer") from exc
    return max(lo, min(hi, number))
