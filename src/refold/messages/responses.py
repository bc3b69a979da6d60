"""Conversion between the OpenAI chat form (canonical in refold) and OpenAI Responses items.

``input_messages(items)`` turns a Responses ``input`` (a string, or items) into chat messages:
``message`` items (roles user, system, developer, assistant; ``input_text``/``output_text``/
``input_image``/``input_file``/``refusal`` parts; the short ``{"role", "content"}`` form too),
``function_call`` items (consecutive calls join one assistant message, after its text if it
has one), ``function_call_output`` (a tool message: a list of parts becomes their text, the
only part a tool message holds) and ``reasoning`` (its summary text becomes the next assistant
message's ``reasoning_content``). An ``input_file`` part becomes a chat ``file`` part (its
``file_data`` or ``file_id``, and ``filename``; a ``file_url`` alone has no chat form and
raises), a ``refusal`` part the text of the refusal. Item ids and statuses have no chat form
and are not kept; other item types raise ``InvalidInput``. This is the form the proxy's
``/v1/responses`` sends upstream and Codex logs are imported in.

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
  their text, as above). No chat-completions field reads the key; a client that replays stored
  messages as they are (an LLM summarizer replaying the prefix) sends it as it sends any other
  key a message was stored with.

``to_items(messages)`` is the inverse for what a client sends back as input: user, system and
developer messages in the short form (content as stored: a string, or ``input_text``,
``input_image`` with its ``detail``, ``input_file`` parts), an assistant's content as a
``message`` item of ``output_text`` (``annotations`` empty) and ``refusal`` parts, its calls
as ``function_call`` items, tool results as ``function_call_output`` (the kept list of parts
while the tool message still holds their text: compaction may have pruned it since), and the
kept items in their places. Normalized, as the chat form has no place for them and valid input
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
from refold.messages.model import Message, content_text, copy_json

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


def _call(item: dict[str, Any], index: int) -> dict[str, Any]:
    if not item.get("call_id") or not item.get("name") or not isinstance(item["call_id"], str) \
            or not isinstance(item["name"], str):
        raise InvalidInput(f"input[{index}]: a function_call needs call_id and name (strings)")
    arguments = item.get("arguments") or ""
    if not isinstance(arguments, str):
        raise InvalidInput(f"input[{index}]: a function_call's arguments must be a JSON string")
    return {"id": item["call_id"], "type": "function",
            "function": {"name": item["name"], "arguments": arguments}}


def _output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return "\n".join(str(p.get("text", "")) for p in output if isinstance(p, dict))
    return json.dumps(output, ensure_ascii=False)


def _keep(message: Message, where: str, value: Any) -> None:
    message.setdefault(KEPT, {})[where] = value


@dataclass
class _Builder:
    round_trip: bool = False
    messages: list[Message] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    kept: list[Any] = field(default_factory=list)  # round_trip: items waiting for a message
    kept_at: int = 0  # the index of the first of them

    def push(self, message: Message) -> None:
        """Append ``message``, the items kept since the last one before it."""
        if self.kept:
            _keep(message, "before", self.kept)
            self.kept = []
        self.messages.append(message)

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
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "system", "developer", "assistant"):
                raise InvalidInput(f"input[{index}].role must be user, system, developer or "
                                   f"assistant, not {role!r}")
            message: Message = {"role": role, "content": _parts(item.get("content"), index,
                                                                role, self.round_trip)}
            if role == "assistant":
                self._take_reasoning(message)
            self.push(message)
        elif kind == "function_call":
            self.assistant().setdefault("tool_calls", []).append(_call(item, index))
        elif kind == "function_call_output":
            output = item.get("output")
            call_id = item.get("call_id")
            if not call_id or not isinstance(call_id, str):
                raise InvalidInput(f"input[{index}]: a function_call_output needs the call_id "
                                   "(a string) of the function_call it answers")
            message = {"role": "tool", "tool_call_id": call_id,
                       "content": _output_text(output)}
            if self.round_trip and isinstance(output, list):
                _keep(message, "output", copy_json(output))
            self.push(message)
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
        else:
            raise InvalidInput(f"input[{index}]: items of type {kind!r} are not supported "
                               "by refold")

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


def to_items(messages: list[Message]) -> list[dict[str, Any]]:
    """Chat messages as Responses input items (see the module docstring)."""
    items: list[dict[str, Any]] = []
    for message in messages:
        items.extend(_kept(message, "before"))
        role = message.get("role")
        if role == "tool":
            items.append({"type": "function_call_output",
                          "call_id": str(message.get("tool_call_id")),
                          "output": _tool_output(message)})
        elif role == "assistant":
            parts = _output_parts(message)
            if parts:
                items.append({"type": "message", "role": "assistant", "content": parts})
            for call in message.get("tool_calls") or []:
                fn = call.get("function") or {}
                items.append({"type": "function_call", "call_id": call.get("id"),
                              "name": fn.get("name"), "arguments": fn.get("arguments") or ""})
        else:
            items.append({"role": role, "content": _content_item(message)})
        items.extend(_kept(message, "after"))
    return items
