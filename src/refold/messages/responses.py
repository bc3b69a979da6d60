"""Conversion between the OpenAI chat form (canonical in refold) and OpenAI Responses items.

``input_messages(items)`` turns a Responses ``input`` (a string, or items) into chat messages:
``message`` items (roles user, system, developer, assistant; ``input_text``/``output_text``/
``input_image``/``input_file``/``refusal`` parts; the short ``{"role", "content"}`` form too),
``function_call`` items (consecutive calls join one assistant message, after its text if it
has one), ``function_call_output`` (a tool message: a list of parts becomes their text, the
only part a tool message holds, an image or a file part a label of its kind, ``[image]``,
``[file: a.pdf]``; the images follow the tool results, after the last of a run of them, in a
user message of their own, ``IMAGES_NOTE`` and the images, as ``/v1/messages`` sends them to a
chat upstream) and ``reasoning`` (its summary text becomes the next assistant message's
``reasoning_content``). A ``custom_tool_call`` (a custom tool's call: free text, Codex's
``apply_patch``) is a call whose arguments are ``{"input": <its input>}`` (``custom_arguments``,
the function a custom tool is to a chat model), a client ``tool_search_call`` a call of the
function ``tool_search`` with its arguments; their outputs (``custom_tool_call_output``, and
``tool_search_output``, the names of the tools it loaded) are tool messages. An
``additional_tools`` item (Codex's tools, sent as an item) is no message: its tools are the
request's (``server.responses_tools``). An ``input_file`` part becomes a chat ``file`` part
(its ``file_data`` or ``file_id``, and ``filename``; a ``file_url`` alone has no chat form and
raises), a ``refusal`` part the text of the refusal. Item ids and statuses have no chat form
and are not kept; other item types raise ``InvalidInput``. This is the form the proxy's
``/v1/responses`` sends upstream and Codex logs are imported in: the same items give the same
messages, so a client re-sending its history re-sends what the ledger stored.

``input_messages(items, round_trip=True)`` is the form for a store of items that gives them
back through ``to_items`` (the openai-agents session): nothing is added to what a chat
message holds, but less is normalized —
- user, system and developer content lists stay lists (a single text part is not made a
  string), an image keeps its ``detail`` (``"auto"`` too), and an assistant's ``refusal`` part
  stays a chat ``refusal`` part;
- what the chat form has no place for is kept verbatim under the message key ``KEPT``
  (``"refold_responses"``), never as content or a call: items of any other type (hosted tool
  calls such as ``web_search_call``, ``file_search_call``, ``computer_call`` and their
  outputs, ``mcp_list_tools``, ``item_reference``, ...) under ``"before"`` on the message that
  comes next, under ``"after"`` on the last message when none comes next, or on an empty
  assistant message of their own when the input holds no other message; a
  ``function_call_output``'s list of parts under ``"output"`` (the tool message's content is
  their text, without labels, and no user message carries its images); a
  ``custom_tool_call`` or ``tool_search_call`` under ``"calls"`` (by call id) on its assistant
  message, and its output item under ``"item"`` on its tool message. No chat-completions field reads the key; a client that replays stored
  messages as they are (an LLM summarizer replaying the prefix) sends it as it sends any other
  key a message was stored with.

``to_items(messages)`` is the inverse for what a client sends back as input: user, system and
developer messages in the short form (content as stored: a string, or ``input_text``,
``input_image`` with its ``detail``, ``input_file`` parts), an assistant's content as a
``message`` item of ``output_text`` (``annotations`` empty) and ``refusal`` parts, its calls
as ``function_call`` items (a kept custom or tool search call as itself while the call is
still what it says), tool results as ``function_call_output`` (the kept list of parts, or the
kept output item, while the tool message still holds their text: compaction may have pruned
it since), and the kept items in their places. Normalized, as the chat form has no place for them and valid input
needs none: item ids and statuses (and the agents SDK's ``provider_data``), the ``"type":
"message"`` of a user, system or developer message, the short form of an assistant's (it comes
back as a ``message`` item), ``annotations`` and ``logprobs``. Reasoning is left out: a
reasoning item is only valid input with the provider's own id (and encrypted content), which
the chat form does not have.
"""

from __future__ import annotations

import json
from typing import Any

from refold._records import dataclass, field
from refold.errors import InvalidInput
from refold.messages.model import TOOL_IMAGES_NOTE, Message, content_text, copy_json

KEPT = "refold_responses"
"""The message key holding, with ``round_trip=True``, what the chat form has no place for."""

_PART_TEXT = ("input_text", "output_text", "text", "summary_text")


def _part(part: Any, index: int, role: str, round_trip: bool) -> dict[str, Any]:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind in _PART_TEXT:
        text = part.get("text", "")
        if not isinstance(text, str):
            raise InvalidInput(f"input[{index}]: the text of an {kind} part must be a string, "
                               f"not {type(text).__name__}")
        return {"type": "text", "text": text}
    if kind == "refusal":
        text = str(part.get("refusal") or part.get("text") or "")
        if round_trip and role == "assistant":
            return {"type": "refusal", "refusal": text}
        return {"type": "text", "text": text}
    if kind == "input_image" and part.get("image_url"):
        image: dict[str, Any] = {"url": part["image_url"]}
        if part.get("detail") and (round_trip or part["detail"] != "auto"):
            image["detail"] = part["detail"]
        return {"type": "image_url", "image_url": image}
    if kind == "input_file":
        if not (part.get("file_data") or part.get("file_id")):
            raise InvalidInput(f"input[{index}]: an input_file part needs file_data or "
                               "file_id (a file_url has no chat form)")
        return {"type": "file", "file": {key: str(part[key]) for key in
                                         ("file_data", "file_id", "filename") if part.get(key)}}
    raise InvalidInput(f"input[{index}]: a {kind!r} part is not supported by refold")


def _parts(content: Any, index: int, role: str, round_trip: bool) -> Any:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InvalidInput(f"input[{index}].content must be a string or a list of parts")
    out = [_part(part, index, role, round_trip) for part in content]
    if len(out) == 1 and out[0]["type"] == "text" and (not round_trip or role == "assistant"):
        return out[0]["text"]
    return out


def _call(item: dict[str, Any], index: int, kind: str = "function_call") -> dict[str, Any]:
    if not item.get("call_id") or not item.get("name") or not isinstance(item["call_id"], str) \
            or not isinstance(item["name"], str):
        raise InvalidInput(f"input[{index}]: a {kind} needs call_id and name (strings)")
    arguments = item.get("arguments") or ""
    if not isinstance(arguments, str):
        raise InvalidInput(f"input[{index}]: a function_call's arguments must be a JSON string")
    return {"id": item["call_id"], "type": "function",
            "function": {"name": item["name"], "arguments": arguments}}


def _output_text(output: Any, labels: bool = False) -> str:
    """A tool output as a tool message's text: a list of parts as their text; ``labels``: an
    image or a file part as a label of its kind (``[image]``, ``[file: a.pdf]``)."""
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return "\n".join(_part_label(p) if labels else str(p.get("text", ""))
                         for p in output if isinstance(p, dict))
    return json.dumps(output, ensure_ascii=False)


def _part_label(part: dict[str, Any]) -> str:
    kind = part.get("type")
    if kind == "input_image":
        return "[image]"
    if kind == "input_file":
        name = part.get("filename") or part.get("file_id")
        return f"[file: {name}]" if isinstance(name, str) and name else "[file]"
    return str(part.get("text", ""))


IMAGES_NOTE = TOOL_IMAGES_NOTE
"""The text of the user message that carries the images of tool results (a chat tool message
holds only text), as ``/v1/messages`` sends them to a chat upstream."""


def _output_images(output: Any, index: int) -> list[dict[str, Any]]:
    """The ``input_image`` parts of a tool output (a list of parts) as chat image parts."""
    return [_part(p, index, "user", False) for p in output if isinstance(p, dict)
            and p.get("type") == "input_image" and p.get("image_url")] \
        if isinstance(output, list) else []


CUSTOM_INPUT = "input"
"""The one (string) parameter of the function a custom tool is to a chat model: a call of
it is a ``custom_tool_call`` whose ``input`` is that string."""


def custom_arguments(text: str) -> str:
    """A custom tool call's ``input`` as the chat call's arguments."""
    return json.dumps({CUSTOM_INPUT: text}, ensure_ascii=False)


def _custom_call(item: dict[str, Any], index: int) -> dict[str, Any]:
    text = item.get("input")
    if not isinstance(text, str):
        raise InvalidInput(f"input[{index}]: a custom_tool_call's input must be a string")
    return _call({**item, "arguments": custom_arguments(text)}, index, item["type"])


def _search_call(item: dict[str, Any], index: int) -> dict[str, Any]:
    """A client ``tool_search_call`` as a call of the function ``tool_search``."""
    arguments = item.get("arguments")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments if arguments is not None else {}, ensure_ascii=False)
    return _call({"call_id": item.get("call_id"), "name": SEARCH_TOOL,
                  "arguments": arguments}, index, item["type"])


SEARCH_TOOL = "tool_search"
"""The name a client-run ``tool_search`` tool has as a chat function."""


def search_output_text(tools: Any) -> str:
    """A ``tool_search_output`` as a tool message's text: the tools it loaded (they are
    callable from then on, refold sends them as the request's tools)."""
    names = []
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, dict):
            continue
        inner = tool.get("tools") if tool.get("type") == "namespace" else None
        if isinstance(inner, list):
            names += [f"{tool.get('name')}.{t.get('name')}" for t in inner
                      if isinstance(t, dict) and t.get("name")]
        elif tool.get("name"):
            names.append(str(tool["name"]))
    return "tools loaded: " + (", ".join(names) if names else "none")


def _keep(message: Message, where: str, value: Any) -> None:
    message.setdefault(KEPT, {})[where] = value


_CALLS = {"function_call": _call, "custom_tool_call": _custom_call,
          "tool_search_call": _search_call}
_RESULTS = ("function_call_output", "custom_tool_call_output", "tool_search_output")


@dataclass
class _Builder:
    round_trip: bool = False
    messages: list[Message] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    kept: list[Any] = field(default_factory=list)  # round_trip: items waiting for a message
    kept_at: int = 0  # the index of the first of them
    images: list[dict[str, Any]] = field(default_factory=list)  # tool results' images

    def push(self, message: Message) -> None:
        """Append ``message``, the items kept since the last one before it."""
        if self.kept:
            _keep(message, "before", self.kept)
            self.kept = []
        self.messages.append(message)

    def flush_images(self) -> None:
        """The images of the tool results so far, in a user message of their own after them
        (a chat tool message holds only text; its text labels them ``[image]``)."""
        if self.images:
            images, self.images = self.images, []
            self.push({"role": "user", "content": [{"type": "text", "text": IMAGES_NOTE},
                                                   *images]})

    def assistant(self) -> Message:
        """The assistant message new calls join: the last one, if nothing came after it."""
        last = self.messages[-1] if self.messages else None
        if last is not None and last.get("role") == "assistant" and not self.reasoning \
                and not self.kept:
            return last
        message: Message = {"role": "assistant", "content": None}
        self._take_reasoning(message)
        self.push(message)
        return message

    def _take_reasoning(self, message: Message) -> None:
        if self.reasoning:
            message["reasoning_content"] = "\n".join(self.reasoning)
            self.reasoning = []

    def add(self, item: Any, index: int) -> None:
        if not isinstance(item, dict):
            raise InvalidInput(f"input[{index}] must be an object")
        kind = item.get("type", "message")
        if kind in ("tool_search_call", "tool_search_output") \
                and item.get("execution") == "server":
            kind = f"{kind} (execution server)"  # the Responses API's own search: no call
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "system", "developer", "assistant"):
                raise InvalidInput(f"input[{index}].role must be user, system, developer or "
                                   f"assistant, not {role!r}")
            message: Message = {"role": role, "content": _parts(item.get("content"), index,
                                                                role, self.round_trip)}
            if role == "assistant":
                self._take_reasoning(message)
            self.flush_images()
            self.push(message)
        elif kind in _CALLS:
            call = _CALLS[kind](item, index)
            message = self.assistant()
            message.setdefault("tool_calls", []).append(call)
            if self.round_trip and kind != "function_call":
                message.setdefault(KEPT, {}).setdefault("calls", {})[call["id"]] = \
                    copy_json(item)
        elif kind in _RESULTS:
            self._result(item, index, kind)
        elif kind == "reasoning":
            summary = item.get("summary") or []
            if not isinstance(summary, list):
                raise InvalidInput(f"input[{index}].summary must be a list of summary parts")
            texts = [str(s.get("text", "")) for s in summary
                     if isinstance(s, dict) and s.get("text")]
            if texts:
                self.reasoning.append("\n".join(texts))
        elif self.round_trip:
            if not self.kept:
                self.kept_at = index
            self.kept.append(copy_json(item))
        elif kind == "additional_tools":
            if not isinstance(item.get("tools"), list):
                raise InvalidInput(f"input[{index}]: an additional_tools item needs a list of "
                                   "'tools'")
            # no message: its tools are the request's (``server.responses_tools``)
        else:
            raise InvalidInput(f"input[{index}]: items of type {kind!r} are not supported "
                               "by refold")

    def _result(self, item: dict[str, Any], index: int, kind: str) -> None:
        """A tool message: the output's text (its images labelled, and sent after the results
        in a user message of their own), or the tools a ``tool_search_output`` loaded."""
        call_id = item.get("call_id")
        if not call_id or not isinstance(call_id, str):
            raise InvalidInput(f"input[{index}]: a {kind} needs the call_id (a string) of the "
                               "call it answers")
        output = item.get("output")
        if kind == "tool_search_output":
            text = search_output_text(item.get("tools"))
        else:
            text = _output_text(output, labels=not self.round_trip)
        message: Message = {"role": "tool", "tool_call_id": call_id, "content": text}
        if not self.round_trip:
            self.images += _output_images(output, index)
        elif kind != "function_call_output":
            _keep(message, "item", copy_json(item))
        elif isinstance(output, list):
            _keep(message, "output", copy_json(output))
        self.push(message)

    def finish(self) -> None:
        """Items kept after the last message: on it, or on an (empty) message of their own."""
        if not self.kept:
            return
        if self.messages:
            _keep(self.messages[-1], "after", self.kept)
            self.kept = []
        else:
            self.push({"role": "assistant", "content": ""})


def input_messages(value: Any, origins: list[int] | None = None, *,
                   round_trip: bool = False) -> list[Message]:
    """The chat-form messages of a Responses ``input``. With ``origins`` (a list), the index
    of the item each message began with is appended to it, one per message. ``round_trip``:
    the form ``to_items`` gives the items back from (see the module docstring)."""
    if isinstance(value, str):
        if origins is not None:
            origins.append(0)
        return [{"role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise InvalidInput("input must be a string or a non-empty list of items")
    builder = _Builder(round_trip)
    for index, item in enumerate(value):
        before = len(builder.messages)
        builder.add(item, index)
        if origins is not None:
            origins.extend([index] * (len(builder.messages) - before))
    before = len(builder.messages)
    builder.flush_images()
    if origins is not None:
        origins.extend([len(value) - 1] * (len(builder.messages) - before))
    before = len(builder.messages)
    builder.finish()
    if origins is not None:
        origins.extend([builder.kept_at] * (len(builder.messages) - before))
    return builder.messages


def _kept(message: Message, where: str) -> list[Any]:
    kept = message.get(KEPT)
    value = kept.get(where) if isinstance(kept, dict) else None
    return copy_json(value) if isinstance(value, list) else []


def _content_item(message: Message) -> Any:
    content = message.get("content")
    if isinstance(content, str) or content is None:
        return content or ""
    parts: list[dict[str, Any]] = []
    for part in content:
        kind = part.get("type")
        if kind == "image_url":
            image = part.get("image_url") or {}
            parts.append({"type": "input_image", "image_url": image.get("url", "")})
            if image.get("detail"):
                parts[-1]["detail"] = image["detail"]
        elif kind == "file":
            file = part.get("file") or {}
            parts.append({"type": "input_file", **{key: file[key] for key in
                                                   ("file_data", "file_id", "filename")
                                                   if key in file}})
        else:
            parts.append({"type": "input_text", "text": str(part.get("text", ""))})
    return parts


def _output_parts(message: Message) -> list[dict[str, Any]]:
    """An assistant's content as ``output_text`` and ``refusal`` parts (empty text left out)."""
    content = message.get("content")
    parts = content if isinstance(content, list) else [{"type": "text", "text": content}]
    out: list[dict[str, Any]] = []
    for part in parts:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "refusal":
            out.append({"type": "refusal", "refusal": str(part.get("refusal") or "")})
        elif isinstance(part.get("text"), str) and part["text"]:
            out.append({"type": "output_text", "text": part["text"], "annotations": []})
    return out


def _tool_output(message: Message) -> Any:
    """A tool message's output: the kept list of parts while its content is still their text."""
    kept = message.get(KEPT)
    output = kept.get("output") if isinstance(kept, dict) else None
    text = content_text(message)
    if isinstance(output, list) and _output_text(output) == text:
        return copy_json(output)
    return text


def _kept_result(message: Message) -> dict[str, Any] | None:
    """A tool message's own ``custom_tool_call_output`` or ``tool_search_output`` item (kept)
    while its content is still what the item says."""
    kept = message.get(KEPT)
    item = kept.get("item") if isinstance(kept, dict) else None
    if not isinstance(item, dict):
        return None
    text = search_output_text(item.get("tools")) if item.get("type") == "tool_search_output" \
        else _output_text(item.get("output"))
    return copy_json(item) if text == content_text(message) else None


def _call_item(message: Message, call: dict[str, Any]) -> dict[str, Any]:
    """An assistant's call as an item: its own ``custom_tool_call`` or ``tool_search_call``
    (kept) while the call is still what the item says, else a ``function_call``."""
    fn = call.get("function") or {}
    kept = message.get(KEPT)
    calls = kept.get("calls") if isinstance(kept, dict) else None
    item = calls.get(call.get("id")) if isinstance(calls, dict) else None
    if isinstance(item, dict):
        again = _CALLS[str(item.get("type"))](item, 0) if item.get("type") in _CALLS else None
        if again is not None and again["function"] == {"name": fn.get("name"),
                                                       "arguments": fn.get("arguments")}:
            return copy_json(item)
    return {"type": "function_call", "call_id": call.get("id"), "name": fn.get("name"),
            "arguments": fn.get("arguments") or ""}


def to_items(messages: list[Message]) -> list[dict[str, Any]]:
    """Chat messages as Responses input items (see the module docstring)."""
    items: list[dict[str, Any]] = []
    for message in messages:
        items.extend(_kept(message, "before"))
        role = message.get("role")
        if role == "tool":
            items.append(_kept_result(message) or {
                "type": "function_call_output", "call_id": str(message.get("tool_call_id")),
                "output": _tool_output(message)})
        elif role == "assistant":
            parts = _output_parts(message)
            if parts:
                items.append({"type": "message", "role": "assistant", "content": parts})
            items += [_call_item(message, call) for call in message.get("tool_calls") or []]
        else:
            items.append({"role": role, "content": _content_item(message)})
        items.extend(_kept(message, "after"))
    return items
