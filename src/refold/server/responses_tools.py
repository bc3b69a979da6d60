"""The tools of a Responses request as a chat upstream takes them, and the calls back.

A chat model calls functions only. Of the Responses tools:

- a ``function`` tool is that function; a ``namespace`` tool groups functions (Codex groups
  its sub-agent and MCP tools so): they join the others, and a call of one goes back with its
  ``namespace``;
- a ``custom`` tool (Codex's ``apply_patch`` and ``exec``: free text, often in a grammar) is a
  function of one string parameter, ``input``, its description saying the text's format (the
  grammar's definition); the model's call of it goes back as a ``custom_tool_call`` whose
  ``input`` is that string, streamed as ``response.custom_tool_call_input.delta``/``done``;
- a ``tool_search`` tool the client runs itself (``"execution": "client"``: Codex's search of
  its deferred tools) is the function ``tool_search`` with the tool's parameters; a call of it
  goes back as a ``tool_search_call`` (``execution: client``, its ``arguments`` a JSON object),
  and the tools a later ``tool_search_output`` loaded are the request's tools from then on;
- the tools the Responses API runs itself (``HOSTED_TOOLS``: web search, …) are left out, as
  ``/v1/messages`` leaves out Anthropic's server tools: the upstream could not run them.

The request's tools are its ``tools`` and those of its input's ``additional_tools`` items (Codex
sends its tools so for some models) and ``tool_search_output`` items; a name given twice is
sent once (the first). Its ``tool_choice`` goes upstream in the chat form (``chat_tool_choice``:
``allowed_tools`` as chat completions' ``allowed_tools``) or is a 400, never dropped.
"""

from __future__ import annotations

import json
import re
from typing import Any

from refold._records import dataclass, field
from refold.errors import InvalidInput
from refold.messages.responses import CUSTOM_INPUT, SEARCH_TOOL

# tools the Responses API runs itself; a chat-completions upstream has none of them to run
HOSTED_TOOLS = frozenset({"web_search", "web_search_preview", "file_search", "code_interpreter",
                          "computer_use_preview", "computer_use", "image_generation", "mcp",
                          "local_shell", "tool_search"})

CUSTOM_PARAMETERS = {
    "type": "object",
    "properties": {CUSTOM_INPUT: {"type": "string",
                                  "description": "The tool's whole input, as raw text."}},
    "required": [CUSTOM_INPUT], "additionalProperties": False}
"""The parameters of the function a custom tool is to a chat model."""

SEARCH_PARAMETERS = {"type": "object", "properties": {"query": {"type": "string"}},
                     "required": ["query"]}


def request_tools(tools: Any, items: list[Any]) -> Any:
    """The request's ``tools`` followed by those its input items add (``additional_tools``,
    ``tool_search_output``); ``tools`` as it is when they add none."""
    extra: list[Any] = []
    for item in items:
        if isinstance(item, dict) and item.get("type") in ("additional_tools",
                                                           "tool_search_output"):
            more = item.get("tools")
            extra += more if isinstance(more, list) else []
    if not extra or not (tools is None or isinstance(tools, list)):
        return tools
    return [*(tools or []), *extra]


def client_search(tool: Any) -> bool:
    """A ``tool_search`` tool the client runs itself (its call goes back to it)."""
    return isinstance(tool, dict) and tool.get("type") == "tool_search" \
        and tool.get("execution") == "client"


def flat(tools: Any) -> list[Any]:
    """The tools with the functions of each ``namespace`` tool in its place."""
    if not isinstance(tools, list):
        return tools
    return [inner for tool in tools for inner in _flat(tool)]


def _flat(tool: Any) -> list[Any]:
    if isinstance(tool, dict) and tool.get("type") == "namespace":
        inner = tool.get("tools")
        if not isinstance(inner, list):
            raise InvalidInput("tools: a namespace tool needs a list of 'tools'")
        return [t for t in inner if not (isinstance(t, dict) and t.get("type") == "namespace")]
    return [tool]


def _custom_description(tool: dict[str, Any]) -> str:
    fmt = tool.get("format")
    fmt = fmt if isinstance(fmt, dict) else {}
    note = (f"Call it with its whole input, raw text (not JSON), as the string argument "
            f"`{CUSTOM_INPUT}`.")
    if fmt.get("type") == "grammar" and isinstance(fmt.get("definition"), str):
        syntax = fmt.get("syntax") or "grammar"
        note += f" The input must match this {syntax} grammar:\n{fmt['definition']}"
    description = tool.get("description")
    return f"{description}\n\n{note}" if isinstance(description, str) and description else note


def function_of(tool: Any) -> dict[str, Any] | None:
    """The chat function of a (flattened) tool; None for a hosted tool."""
    kind = tool.get("type") if isinstance(tool, dict) else tool
    if client_search(tool):
        parameters = tool.get("parameters")
        return {"name": SEARCH_TOOL, "description": str(tool.get("description") or
                                                        "Search for more tools."),
                "parameters": parameters if isinstance(parameters, dict) else SEARCH_PARAMETERS}
    if isinstance(kind, str) and kind in HOSTED_TOOLS:
        return None
    if isinstance(tool, dict) and kind == "custom":
        if not (isinstance(tool.get("name"), str) and tool["name"]):
            raise InvalidInput("tools: a custom tool needs a 'name' (a non-empty string)")
        return {"name": tool["name"], "description": _custom_description(tool),
                "parameters": CUSTOM_PARAMETERS}
    if not isinstance(tool, dict) or kind != "function":
        raise InvalidInput(f"tools: refold takes function, custom and client tool_search "
                           f"tools (and namespaces of them), not {kind!r}")
    return {k: tool[k] for k in ("name", "description", "parameters", "strict") if k in tool}


def chat_tool_choice(choice: Any, names: set[Any]) -> Any:
    """The chat ``tool_choice`` of a Responses one (None: none given); ``names``: the chat
    functions the request sends. ``auto``, ``none``, ``required``, a function or custom tool
    by name, and ``allowed_tools`` (its functions and custom tools; a hosted tool in it is left
    out, as the tool itself is) pass on; anything else is a 400, never dropped (it was, and the
    response echoed the choice as honoured)."""
    if choice is None or choice in ("auto", "none", "required"):
        return choice
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind in ("function", "custom"):
        return _named(_choice_name(choice, kind, names))
    if kind == "allowed_tools":
        return _allowed_tools(choice, names)
    if isinstance(kind, str) and (kind in HOSTED_TOOLS or kind in ("apply_patch", "shell")):
        raise InvalidInput(
            f"tool_choice {kind!r}: refold cannot make the model use a tool the Responses API "
            "runs itself (no such tool is sent to a chat-completions upstream); choose a "
            "function or custom tool, 'auto', 'none', 'required' or allowed_tools")
    raise InvalidInput(
        "tool_choice must be 'auto', 'none', 'required', a function or custom tool "
        '({"type": "function", "name": ...}) or {"type": "allowed_tools", "mode": ..., '
        f'"tools": [...]}}, not {json.dumps(choice, ensure_ascii=False)[:200]}')


def _named(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name}}


def _choice_name(tool: dict[str, Any], kind: str, names: set[Any]) -> str:
    name = tool.get("name")
    if not (isinstance(name, str) and name):
        raise InvalidInput(f"tool_choice: a {kind} tool needs a 'name' (a non-empty string)")
    if name not in names:
        raise InvalidInput(f"tool_choice names the tool {name!r}, which is not among the "
                           "request's function or custom tools")
    return name


def _allowed_tools(choice: dict[str, Any], names: set[Any]) -> Any:
    """Chat completions' ``allowed_tools`` (``{"type": "allowed_tools", "allowed_tools":
    {"mode", "tools": [{"type": "function", "function": {"name"}}]}}``) of a Responses one
    (``{"type": "allowed_tools", "mode", "tools": [{"type": "function", "name"}]}``)."""
    mode = choice.get("mode")
    if mode not in ("auto", "required"):
        raise InvalidInput("tool_choice allowed_tools: 'mode' must be 'auto' or 'required'")
    tools = choice.get("tools")
    if not isinstance(tools, list) or not tools:
        raise InvalidInput("tool_choice allowed_tools: 'tools' must be a non-empty list")
    allowed: list[dict[str, Any]] = []
    for tool in tools:
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind == "tool_search" and SEARCH_TOOL in names:  # the client's tool_search
            allowed.append(_named(SEARCH_TOOL))
        elif isinstance(tool, dict) and kind in ("function", "custom"):
            allowed.append(_named(_choice_name(tool, kind, names)))
        elif not (isinstance(kind, str) and kind in HOSTED_TOOLS):
            raise InvalidInput(f"tool_choice allowed_tools: refold takes function, custom and "
                               f"hosted tools in 'tools', not {kind!r}")
    if not allowed and mode == "required":
        raise InvalidInput("tool_choice allowed_tools requires a call of tools the Responses API "
                           "runs itself, which refold does not send to a chat-completions "
                           "upstream; allow a function or custom tool")
    if not allowed:  # only hosted tools, none of which the model is given: it calls none
        return "none"
    return {"type": "allowed_tools", "allowed_tools": {"mode": mode, "tools": allowed}}


@dataclass
class ToolKinds:
    """What a call of a function goes back as: by function name, its ``namespace``; the names
    of the custom tools and the client's ``tool_search``."""

    spaces: dict[str, str] = field(default_factory=dict)
    custom: frozenset[str] = frozenset()
    search: frozenset[str] = frozenset()


def tool_kinds(tools: Any) -> ToolKinds:
    spaces: dict[str, str] = {}
    custom: set[str] = set()
    search: set[str] = set()
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, dict):
            continue
        inner = tool.get("tools") if tool.get("type") == "namespace" else None
        for one in inner if isinstance(inner, list) else [tool]:
            if not isinstance(one, dict):
                continue
            if client_search(one):
                search.add(SEARCH_TOOL)
                continue
            name = one.get("name")
            if not isinstance(name, str):
                continue
            if inner is not None and isinstance(tool.get("name"), str):
                spaces.setdefault(name, tool["name"])
            if one.get("type") == "custom":
                custom.add(name)
    return ToolKinds(spaces, frozenset(custom), frozenset(search))


def custom_input(arguments: str) -> str:
    """The ``input`` of a custom tool's call from the chat call's arguments (its one string
    argument; the arguments as they are when they are not an object holding one)."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return arguments
    if isinstance(value, dict):
        if isinstance(value.get(CUSTOM_INPUT), str):
            return value[CUSTOM_INPUT]
        strings = [v for v in value.values() if isinstance(v, str)]
        if len(value) == 1 and strings:
            return strings[0]
    return value if isinstance(value, str) else arguments


def search_arguments(arguments: str) -> Any:
    """A ``tool_search_call``'s ``arguments`` (a JSON value) from the chat call's."""
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        return {"query": arguments}
    return value if isinstance(value, dict) else {"query": value}


def reply_item(item_id: str, call: dict[str, Any], kinds: ToolKinds | None,
               status: str = "completed") -> dict[str, Any]:
    """A model's chat call as the output item it is: a ``function_call`` (with its
    ``namespace`` when the request grouped the function in one), a ``custom_tool_call`` or a
    ``tool_search_call``."""
    kinds = kinds or ToolKinds()
    fn = call.get("function") or {}
    name = fn.get("name")
    arguments = str(fn.get("arguments") or "")
    item: dict[str, Any]
    if name in kinds.search:
        return {"type": "tool_search_call", "id": item_id, "call_id": call.get("id"),
                "execution": "client", "status": status,
                "arguments": search_arguments(arguments)}
    if name in kinds.custom:
        item = {"type": "custom_tool_call", "id": item_id, "call_id": call.get("id"),
                "name": name, "input": custom_input(arguments), "status": status}
    else:
        item = {"type": "function_call", "id": item_id, "call_id": call.get("id"),
                "name": name, "arguments": arguments, "status": status}
    space = kinds.spaces.get(name) if isinstance(name, str) else None
    if space is not None:
        item["namespace"] = space
    return item


_HEAD = re.compile(r'\s*\{\s*"' + CUSTOM_INPUT + r'"\s*:\s*"')


class InputDeltas:
    """The ``input`` of a streamed custom tool call as it comes: feed the chat call's argument
    fragments, get the text the input grew by (decoded from the JSON string of its argument,
    an escape not whole yet held back). Nothing when the arguments are not ``{"input": "…``
    (their input is known at the end only)."""

    def __init__(self) -> None:
        self.raw = ""
        self.used: int | None = None  # of ``raw``, decoded so far (None: no string found yet)
        self.ended = False  # the string's closing quote was seen (or it cannot be followed)
        self.given = ""  # the input given so far

    def feed(self, fragment: str) -> str:
        self.raw += fragment
        if self.ended:
            return ""
        if self.used is None:
            head = _HEAD.match(self.raw)
            if head is None:
                return ""
            self.used = head.end()
        text = self.raw[self.used:]
        end, self.ended = _string_end(text)
        text = text[:end]
        try:
            piece = json.loads(f'"{text}"')
        except ValueError:
            self.ended = True  # not a string to follow: the input is known at the end
            return ""
        if piece and "\ud800" <= piece[-1] <= "\udbff" and not self.ended:
            piece, text = piece[:-1], text[:-6]  # half a surrogate pair: with the other half
        self.used += len(text)
        self.given += piece
        return str(piece)


def _string_end(text: str) -> tuple[int, bool]:
    """How much of ``text`` (the inside of a JSON string, from some point on) is whole: up to
    its closing quote (True), else up to an escape not whole yet, or all of it."""
    index, size = 0, len(text)
    while index < size:
        char = text[index]
        if char == '"':
            return index, True
        if char == "\\":
            step = 6 if text[index + 1:index + 2] == "u" else 2
            if index + step > size:
                return index, False
            index += step
        else:
            index += 1
    return index, False
