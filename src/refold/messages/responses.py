"""Conversion between the OpenAI chat form (canonical in refold) and OpenAI Responses items.

``input_messages(items)`` turns a Responses ``input`` (a string, or items) into chat messages:
``message`` items (roles user, system, developer, assistant; ``input_text``/``output_text``/
``input_image`` parts; the short ``{"role", "content"}`` form too), ``function_call`` items
(consecutive calls join one assistant message, after its text if it has one),
``function_call_output`` (a tool message) and ``reasoning`` (its summary text becomes the next
assistant message's ``reasoning_content``). Item ids and statuses have no chat form and are
not kept; other item types raise ``InvalidInput``.

``to_items(messages)`` is the inverse for what a client sends back as input: user, system and
developer messages in the short form, an assistant's text as an ``output_text`` message item,
its calls as ``function_call`` items, tool results as ``function_call_output``. Reasoning is
left out: a reasoning item is only valid input with the provider's own id (and encrypted
content), which the chat form does not have.
"""

from __future__ import annotations

import json
from typing import Any

from refold._records import dataclass, field
from refold.errors import InvalidInput
from refold.messages.model import Message, content_text

_PART_TEXT = ("input_text", "output_text", "text", "summary_text", "refusal")


def _parts(content: Any, index: int) -> Any:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InvalidInput(f"input[{index}].content must be a string or a list of parts")
    out: list[dict[str, Any]] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in _PART_TEXT:
            out.append({"type": "text", "text": str(part.get("text", ""))})
        elif kind == "input_image" and part.get("image_url"):
            image: dict[str, Any] = {"url": part["image_url"]}
            if part.get("detail") and part["detail"] != "auto":
                image["detail"] = part["detail"]
            out.append({"type": "image_url", "image_url": image})
        else:
            raise InvalidInput(f"input[{index}]: a {kind!r} part is not supported by refold")
    if len(out) == 1 and out[0]["type"] == "text":
        return out[0]["text"]
    return out


def _call(item: dict[str, Any], index: int) -> dict[str, Any]:
    if not item.get("call_id") or not item.get("name"):
        raise InvalidInput(f"input[{index}]: a function_call needs call_id and name")
    return {"id": item["call_id"], "type": "function",
            "function": {"name": item["name"], "arguments": str(item.get("arguments") or "")}}


def _output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return "\n".join(str(p.get("text", "")) for p in output if isinstance(p, dict))
    return json.dumps(output, ensure_ascii=False)


@dataclass
class _Builder:
    messages: list[Message] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)

    def assistant(self) -> Message:
        """The assistant message new calls join: the last one, if nothing came after it."""
        last = self.messages[-1] if self.messages else None
        if last is not None and last.get("role") == "assistant" and not self.reasoning:
            return last
        message: Message = {"role": "assistant", "content": None}
        self._take_reasoning(message)
        self.messages.append(message)
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
            message: Message = {"role": role, "content": _parts(item.get("content"), index)}
            if role == "assistant":
                self._take_reasoning(message)
            self.messages.append(message)
        elif kind == "function_call":
            self.assistant().setdefault("tool_calls", []).append(_call(item, index))
        elif kind == "function_call_output":
            self.messages.append({"role": "tool", "tool_call_id": str(item.get("call_id")),
                                  "content": _output_text(item.get("output"))})
        elif kind == "reasoning":
            summary = item.get("summary") or []
            if not isinstance(summary, list):
                raise InvalidInput(f"input[{index}].summary must be a list of summary parts")
            texts = [str(s.get("text", "")) for s in summary
                     if isinstance(s, dict) and s.get("text")]
            if texts:
                self.reasoning.append("\n".join(texts))
        else:
            raise InvalidInput(f"input[{index}]: items of type {kind!r} are not supported "
                               "by refold")


def input_messages(value: Any, origins: list[int] | None = None) -> list[Message]:
    """The chat-form messages of a Responses ``input``. With ``origins`` (a list), the index
    of the item each message began with is appended to it, one per message."""
    if isinstance(value, str):
        if origins is not None:
            origins.append(0)
        return [{"role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise InvalidInput("input must be a string or a non-empty list of items")
    builder = _Builder()
    for index, item in enumerate(value):
        before = len(builder.messages)
        builder.add(item, index)
        if origins is not None:
            origins.extend([index] * (len(builder.messages) - before))
    return builder.messages


def _content_item(message: Message) -> Any:
    content = message.get("content")
    if isinstance(content, str) or content is None:
        return content or ""
    parts: list[dict[str, Any]] = []
    for part in content:
        if part.get("type") == "image_url":
            parts.append({"type": "input_image",
                          "image_url": (part.get("image_url") or {}).get("url", "")})
        else:
            parts.append({"type": "input_text", "text": str(part.get("text", ""))})
    return parts


def to_items(messages: list[Message]) -> list[dict[str, Any]]:
    """Chat messages as Responses input items (see the module docstring)."""
    items: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role == "tool":
            items.append({"type": "function_call_output",
                          "call_id": str(message.get("tool_call_id")),
                          "output": content_text(message)})
        elif role == "assistant":
            text = content_text(message)
            if text:
                items.append({"type": "message", "role": "assistant", "content": [
                    {"type": "output_text", "text": text, "annotations": []}]})
            for call in message.get("tool_calls") or []:
                fn = call.get("function") or {}
                items.append({"type": "function_call", "call_id": call.get("id"),
                              "name": fn.get("name"), "arguments": fn.get("arguments") or ""})
        else:
            items.append({"role": role, "content": _content_item(message)})
    return items
