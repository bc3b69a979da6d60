"""Conversion between the OpenAI chat form (canonical in refold) and Anthropic Messages.

``to_anthropic(messages)`` returns ``{"system": str, "messages": [...]}`` (``system`` omitted
when there is none), ready to merge into a Messages API request:
- system and developer messages (wherever they are) are joined, in order, into ``system``;
- the transcript is first repaired (``refold.messages.repair``) so tool results follow their
  calls; assistant ``tool_calls`` become ``tool_use`` blocks; tool messages become
  ``tool_result`` blocks in a user message, consecutive results grouped into one user turn,
  and a user message that follows them joins that same turn;
- consecutive same-side messages are merged, so the result strictly alternates user/assistant;
- ``image_url`` parts become ``image`` blocks (``base64`` source for data URIs, ``url`` source
  otherwise; ``detail`` is dropped); ``file`` parts with ``file_data`` become ``document``
  blocks; audio and ``file_id`` parts have no Anthropic form and raise
  ``MessageValidationError``;
- reasoning: an assistant's ``thinking_blocks`` (signed blocks captured by ``from_anthropic``)
  are sent verbatim; otherwise ``reasoning_content`` / ``reasoning`` becomes an unsigned
  ``thinking`` block, or is dropped with ``drop_unsigned_thinking=True`` (the live API only
  accepts signed thinking back);
- tool arguments that parse to a JSON object become ``input``; any other string is kept
  losslessly as ``{"_raw_arguments": text}``, and an empty string becomes ``{}``.

``from_anthropic(messages, system=...)`` is the inverse: ``tool_result`` blocks become tool
messages (placed before the user text of the same turn), ``thinking`` blocks become
``reasoning_content`` (plus the exact ``thinking_blocks``), a content list that is a single text
block becomes a plain string. ``is_error`` on a tool result and images inside tool results
have no OpenAI form: the former is dropped, the latter becomes the text ``[image]``.

Round trip: for a transcript that is already repaired, alternating, has its system message
first and tool arguments as ``json.dumps(obj, ensure_ascii=False)``,
``from_anthropic(**to_anthropic(m)) == m``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from refold.errors import MessageValidationError
from refold.messages.model import Message, content_text
from refold.messages.repair import repair

Block = dict[str, Any]
RAW_ARGUMENTS = "_raw_arguments"


# -- OpenAI -> Anthropic -----------------------------------------------------------------------

def _image_block(url: str) -> Block:
    if url.startswith("data:"):
        header, _, data = url.partition(",")
        media_type = header[len("data:"):].split(";", 1)[0] or "image/png"
        return {"type": "image", "source": {"type": "base64", "media_type": media_type,
                                            "data": data}}
    return {"type": "image", "source": {"type": "url", "url": url}}


def _part_to_block(part: dict[str, Any], index: int) -> Block:
    kind = part.get("type")
    if kind in ("text", "refusal"):
        return {"type": "text", "text": str(part.get(kind) or part.get("text") or "")}
    if kind == "image_url":
        return _image_block(str((part.get("image_url") or {}).get("url", "")))
    if kind == "file":
        file = part.get("file") or {}
        data = file.get("file_data")
        if isinstance(data, str) and data.startswith("data:"):
            header, _, payload = data.partition(",")
            block: Block = {"type": "document", "source": {
                "type": "base64", "media_type": header[5:].split(";", 1)[0], "data": payload}}
            if file.get("filename"):
                block["title"] = file["filename"]
            return block
    raise MessageValidationError(f"a {kind!r} part has no Anthropic equivalent", index=index,
                                 field="content")


def _content_blocks(content: Any, index: int) -> list[Block]:
    if content is None or content == "":
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [_part_to_block(p, index) for p in content]


def tool_input(arguments: str) -> dict[str, Any]:
    if not arguments.strip():
        return {}
    try:
        value = json.loads(arguments)
    except ValueError:
        return {RAW_ARGUMENTS: arguments}
    return value if isinstance(value, dict) else {RAW_ARGUMENTS: arguments}


def _thinking_blocks(message: Message, drop_unsigned: bool) -> list[Block]:
    if message.get("thinking_blocks"):
        return [dict(b) for b in message["thinking_blocks"]]
    text = message.get("reasoning_content") or message.get("reasoning")
    if not text or drop_unsigned:
        return []
    return [{"type": "thinking", "thinking": text}]


def _assistant_blocks(message: Message, index: int, drop_unsigned: bool) -> list[Block]:
    blocks = _thinking_blocks(message, drop_unsigned)
    blocks += _content_blocks(message.get("content"), index)
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        blocks.append({"type": "tool_use", "id": call.get("id"), "name": fn.get("name"),
                       "input": tool_input(str(fn.get("arguments") or ""))})
    return blocks


def _tool_result_block(message: Message) -> Block:
    content = message.get("content")
    value: Any = content if isinstance(content, str) else [
        {"type": "text", "text": content_text(message)}]
    return {"type": "tool_result", "tool_use_id": message.get("tool_call_id"), "content": value}


def _append_turn(turns: list[dict[str, Any]], role: str, blocks: list[Block],
                 plain: str | None) -> None:
    """Add blocks to the conversation, merging into the last turn when the side repeats."""
    if not blocks:
        return
    if turns and turns[-1]["role"] == role:
        last = turns[-1]
        if isinstance(last["content"], str):
            last["content"] = [{"type": "text", "text": last["content"]}]
        last["content"].extend(blocks)
        return
    turns.append({"role": role, "content": plain if plain is not None else blocks})


def to_anthropic(messages: Sequence[Message], *,
                 drop_unsigned_thinking: bool = False) -> dict[str, Any]:
    """Convert an OpenAI-form transcript to ``{"system": ..., "messages": [...]}``."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for index, message in enumerate(repair(messages).messages):
        role = message.get("role")
        content = message.get("content")
        if role in ("system", "developer"):
            system.append(content_text(message))
        elif role == "tool":
            _append_turn(turns, "user", [_tool_result_block(message)], None)
        elif role == "user":
            plain = content if isinstance(content, str) and content else None
            _append_turn(turns, "user", _content_blocks(content, index), plain)
        else:
            blocks = _assistant_blocks(message, index, drop_unsigned_thinking)
            only_text = isinstance(content, str) and content and len(blocks) == 1
            _append_turn(turns, "assistant", blocks, content if only_text else None)
    out: dict[str, Any] = {"messages": turns}
    if system:
        out["system"] = "\n\n".join(system)
    return out


# -- Anthropic -> OpenAI -----------------------------------------------------------------------

def _data_uri(source: dict[str, Any], index: int) -> str:
    media_type, data = source.get("media_type"), source.get("data")
    if not isinstance(media_type, str) or not isinstance(data, str) or not data:
        raise MessageValidationError("a base64 source needs string media_type and data",
                                     index=index, field="content")
    return f"data:{media_type};base64,{data}"


def _block_to_part(block: Block, index: int) -> dict[str, Any]:
    kind = block.get("type")
    if kind == "text":
        return {"type": "text", "text": block.get("text", "")}
    source = block.get("source")
    source = source if isinstance(source, dict) else {}
    if kind == "image":
        if source.get("type") == "base64":
            return {"type": "image_url", "image_url": {"url": _data_uri(source, index)}}
        return {"type": "image_url", "image_url": {"url": str(source.get("url", ""))}}
    if kind == "document" and source.get("type") == "base64":
        file: dict[str, Any] = {"file_data": _data_uri(source, index)}
        if block.get("title"):
            file["filename"] = block["title"]
        return {"type": "file", "file": file}
    if kind == "document" and source.get("type") == "text":
        return {"type": "text", "text": str(source.get("data", ""))}
    raise MessageValidationError(f"Anthropic block type {kind!r} has no OpenAI equivalent",
                                 index=index, field="content")


def _openai_content(parts: list[dict[str, Any]]) -> Any:
    if len(parts) == 1 and parts[0].get("type") == "text":
        return parts[0]["text"]
    return parts


def _tool_result_text(block: Block) -> str:
    content = block.get("content")
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        return str(content)
    texts = [str(b.get("text", "")) if isinstance(b, dict) and b.get("type") == "text"
             else "[image]" for b in content]
    return "\n".join(texts)


def _user_messages(content: list[Block], index: int) -> list[Message]:
    out: list[Message] = []
    parts: list[dict[str, Any]] = []
    for block in content:
        if block.get("type") == "tool_result":
            out.append({"role": "tool", "tool_call_id": block.get("tool_use_id"),
                        "content": _tool_result_text(block)})
        else:
            parts.append(_block_to_part(block, index))
    if parts:
        out.append({"role": "user", "content": _openai_content(parts)})
    return out


def _arguments(value: Any) -> str:
    if isinstance(value, dict) and set(value) == {RAW_ARGUMENTS}:
        return str(value[RAW_ARGUMENTS])
    return json.dumps(value if value is not None else {}, ensure_ascii=False)


def _assistant_message(content: list[Block], index: int) -> Message:
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    thinking: list[Block] = []
    for block in content:
        kind = block.get("type")
        if kind in ("thinking", "redacted_thinking"):
            thinking.append(dict(block))
        elif kind == "tool_use":
            calls.append({"id": block.get("id"), "type": "function", "function": {
                "name": block.get("name"), "arguments": _arguments(block.get("input"))}})
        else:
            parts.append(_block_to_part(block, index))
    message: Message = {"role": "assistant", "content": _openai_content(parts) if parts else None}
    if calls:
        message["tool_calls"] = calls
    if thinking:
        message["reasoning_content"] = "\n".join(
            str(b.get("thinking", "")) for b in thinking if b.get("type") == "thinking")
        if any("signature" in b or b.get("type") == "redacted_thinking" for b in thinking):
            message["thinking_blocks"] = thinking
    return message


def _system_text(system: str | Sequence[Block] | None) -> str:
    if system is None or isinstance(system, str):
        return system or ""
    if not isinstance(system, list) or not all(isinstance(b, dict) for b in system):
        raise MessageValidationError("system must be a string or a list of text blocks",
                                     field="system")
    return "\n\n".join(str(b.get("text", "")) for b in system if b.get("type") == "text")


def from_anthropic(messages: Sequence[dict[str, Any]], *,
                   system: str | Sequence[Block] | None = None) -> list[Message]:
    """Convert Anthropic ``messages`` (and the top-level ``system``) to the OpenAI form."""
    out: list[Message] = []
    text = _system_text(system)
    if text:
        out.append({"role": "system", "content": text})
    for index, turn in enumerate(messages):
        if not isinstance(turn, dict):
            raise MessageValidationError("an Anthropic message must be an object", index=index)
        role, content = turn.get("role"), turn.get("content")
        if role not in ("user", "assistant", "system"):
            raise MessageValidationError(f"Anthropic role must be user, assistant or system, "
                                         f"not {role!r}", index=index, field="role")
        if role == "system":  # a system turn inside the conversation (Claude Code 2.1 sends one)
            out.append({"role": "system", "content": _system_text(content)})
        elif isinstance(content, str):
            out.append({"role": role, "content": content})
        elif not isinstance(content, list) or not all(isinstance(b, dict) for b in content):
            raise MessageValidationError("content must be a string or a list of block objects",
                                         index=index, field="content")
        elif role == "user":
            out.extend(_user_messages(content, index))
        else:
            out.append(_assistant_message(content, index))
    return out
