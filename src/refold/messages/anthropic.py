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
block becomes a plain string. The blocks of a tool Anthropic runs itself (``server_tool_use``,
``web_search_tool_result``, ``web_fetch_tool_result``, code execution, MCP connectors) become
text a chat model can read (the call and its input; the results' titles and URLs, an error
code, an output), and a text block's ``citations`` are left out of the chat form. Whenever the
chat form cannot give an assistant turn's blocks back exactly (those, or text between tool
calls), the blocks are kept verbatim beside it under ``KEPT`` (``"anthropic_blocks"``, not part
of the message's identity): ``to_anthropic`` sends them instead of the rebuilt ones while the
chat form still says what they say (compaction may prune or cut it), and
``for_chat_upstream`` leaves them out for an OpenAI-compatible upstream. A ``tool_result``
the chat form cannot give back exactly (``is_error``, images, documents, a list of blocks) is
kept so too, on its tool message — a text result without its text, which the message holds —
and the message's text is the result's text blocks, each other block a label of its kind
(``[image]``, ``[document: a.pdf]``); for an OpenAI-compatible
upstream ``for_chat_upstream`` marks a failed result (``[error] …``) and sends its images in a
user message after the results (never stored).

Round trip: for a transcript that is already repaired, alternating, has its system message
first and tool arguments as ``json.dumps(obj, ensure_ascii=False)``,
``from_anthropic(**to_anthropic(m)) == m``.
"""

from __future__ import annotations

import json
import operator
import threading
from collections import OrderedDict
from collections.abc import Sequence
from itertools import repeat
from typing import Any

from refold._records import dataclass
from refold.errors import MessageValidationError
from refold.jsonscan import native, prefix
from refold.messages.model import TOOL_IMAGES_NOTE, Message, as_plain, content_text, copy_json
from refold.messages.repair import repair

Block = dict[str, Any]
RAW_ARGUMENTS = "_raw_arguments"
KEPT = "anthropic_blocks"
"""The message key holding an assistant turn's own blocks when the chat form cannot say them
exactly (server tools, citations, text between tool calls): not part of the identity; sent
back verbatim to an Anthropic upstream while the chat form still says what they say."""


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


def _kept_blocks(message: Message, drop_unsigned: bool) -> list[Block] | None:
    """The assistant's own blocks (``KEPT``) while its chat form is still theirs: compaction
    may have pruned or cut the chat form since, and then the chat form is what is sent."""
    kept = message.get(KEPT)
    if not isinstance(kept, list) or not kept or not all(isinstance(b, dict) for b in kept):
        return None
    try:
        said = _assistant_message(kept, 0, keep=False)
    except MessageValidationError:
        return None
    if (said.get("content") or None) != (message.get("content") or None) \
            or _calls_core(said.get("tool_calls")) != _calls_core(message.get("tool_calls")):
        return None
    blocks = copy_json(kept)
    if drop_unsigned:  # (as for reasoning: the live API only takes signed thinking back)
        blocks = [b for b in blocks if b.get("type") != "thinking" or "signature" in b]
    return blocks


def _calls_core(calls: Any) -> list[tuple[Any, Any, Any]]:
    out = []
    for call in calls if isinstance(calls, list) else []:
        call = call if isinstance(call, dict) else {}
        fn = call.get("function")
        fn = fn if isinstance(fn, dict) else {}
        out.append((call.get("id"), fn.get("name"), tool_input(str(fn.get("arguments") or ""))))
    return out


def _assistant_blocks(message: Message, index: int, drop_unsigned: bool) -> list[Block]:
    kept = _kept_blocks(message, drop_unsigned) if KEPT in message else None
    if kept is not None:
        return kept
    blocks = _thinking_blocks(message, drop_unsigned)
    blocks += _content_blocks(message.get("content"), index)
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        blocks.append({"type": "tool_use", "id": call.get("id"), "name": fn.get("name"),
                       "input": tool_input(str(fn.get("arguments") or ""))})
    return blocks


def _rebuilt_result(message: Message) -> Block:
    content = message.get("content")
    value: Any = content if isinstance(content, str) else [
        {"type": "text", "text": content_text(message)}]
    return {"type": "tool_result", "tool_use_id": message.get("tool_call_id"), "content": value}


def _kept_result(message: Message) -> Block | None:
    """A tool message's own ``tool_result`` block (``KEPT``): a text result's is kept without
    its text (the tool message holds it: ``is_error: false`` on every Claude Code result would
    store each output twice), and goes with the message's text, pruned or not; a list of
    blocks is kept whole, and given back while the chat form still says what it says
    (compaction may have pruned the output since)."""
    kept = message.get(KEPT)
    if not isinstance(kept, list) or len(kept) != 1 or not isinstance(kept[0], dict):
        return None
    block = kept[0]
    if block.get("type") != "tool_result" or block.get("tool_use_id") != \
            message.get("tool_call_id"):
        return None
    if "content" not in block:
        text = content_text(message)
        return {**block, "content": text} if text else block
    if _tool_result_text(block) != content_text(message):
        return None
    return block


def _tool_result_block(message: Message) -> Block:
    kept = _kept_result(message) if KEPT in message else None
    if kept is not None:
        return copy_json(kept)
    block = _rebuilt_result(message)
    held = message.get(KEPT)
    if isinstance(held, list) and held and isinstance(held[0], dict) and held[0].get("is_error"):
        block["is_error"] = True  # (the output was pruned: it still failed)
    return block


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


ERROR_MARK = "[error] "


def _image_parts(block: Block) -> list[dict[str, Any]]:
    content = block.get("content")
    parts = []
    for item in content if isinstance(content, list) else []:
        if isinstance(item, dict) and item.get("type") == "image":
            try:
                parts.append(_block_to_part(item, 0))
            except MessageValidationError:
                continue
    return parts


def for_chat_upstream(messages: list[Message]) -> list[Message]:
    """``messages`` as an OpenAI-compatible upstream takes them (the list itself when no
    message keeps Anthropic blocks): without the blocks kept beside the chat form (``KEPT``),
    which no chat API knows; a tool result the client marked ``is_error`` says so first
    (``[error] ``), and the images of tool results (a chat tool message holds only text) follow
    the results in a user message of their own, so the model still sees them."""
    if not any(map(operator.contains, messages, repeat(KEPT))):
        return messages  # (checked at C speed: this runs on every proxied request)
    out: list[Message] = []
    images: list[dict[str, Any]] = []
    for message in messages:
        if message.get("role") != "tool" and images:
            out.append({"role": "user", "content": [
                {"type": "text", "text": TOOL_IMAGES_NOTE}, *images]})
            images = []
        if KEPT not in message:
            out.append(message)
            continue
        plain = {k: v for k, v in message.items() if k != KEPT}
        block = _kept_result(message) if message.get("role") == "tool" else None
        if block is not None:
            if block.get("is_error") and isinstance(plain.get("content"), str):
                plain["content"] = ERROR_MARK + plain["content"]
            images += _image_parts(block)
        out.append(plain)
    if images:
        out.append({"role": "user", "content": [
            {"type": "text", "text": TOOL_IMAGES_NOTE}, *images]})
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


def server_block(block: Block) -> bool:
    """A block of a tool Anthropic runs itself (web search, web fetch, code execution, MCP
    connectors): its call and its result are both in the assistant's turn."""
    kind = str(block.get("type") or "")
    return kind in ("server_tool_use", "mcp_tool_use", "container_upload") or (
        kind.endswith("_tool_result") and kind != "tool_result")


def _server_text(block: Block) -> str:
    """A server tool's block as text a chat model can read: the call and its input, the
    result's titles and URLs (or error code, or output)."""
    kind = str(block.get("type"))
    if kind.endswith("_tool_use"):
        arguments = json.dumps(block.get("input"), ensure_ascii=False, sort_keys=True)
        return f"[{kind.replace('_', ' ')}: {block.get('name')} {arguments}]"
    lines = [f"[{kind.replace('_', ' ')}]"]
    content = block.get("content")
    for item in content if isinstance(content, list) else [content]:
        if not isinstance(item, dict):
            continue
        if item.get("url") or item.get("title"):
            title, url = item.get("title"), item.get("url")
            lines.append("- " + " ".join(str(w) for w in (title, url and f"<{url}>") if w))
        if item.get("error_code"):
            lines.append(f"error: {item['error_code']}")
        for stream in ("stdout", "stderr"):
            if isinstance(item.get(stream), str) and item[stream]:
                lines.append(f"{stream}: {item[stream]}")
    return "\n".join(lines)


def _openai_content(parts: list[dict[str, Any]]) -> Any:
    if len(parts) == 1 and parts[0].get("type") == "text":
        return parts[0]["text"]
    return parts


def _label(block: Any) -> str:
    """A non-text block of a tool result, named by its kind."""
    if not isinstance(block, dict):
        return "[content]"
    kind = str(block.get("type") or "content")
    if kind == "image":
        return "[image]"
    given = block.get("source")
    source: dict[str, Any] = given if isinstance(given, dict) else {}
    if kind == "document" and source.get("type") == "text" and isinstance(source.get("data"),
                                                                          str):
        return str(source["data"])
    name = block.get("title") or source.get("media_type") or given \
        if kind in ("document", "search_result") else None
    return f"[{kind}: {name}]" if isinstance(name, str) and name else f"[{kind}]"


def _tool_result_text(block: Block) -> str:
    """A tool result's output as the tool message's text: its text blocks, and each other
    block as a label of its kind (``[image]``, ``[document: a.pdf]``)."""
    content = block.get("content")
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        return str(content)
    texts = [str(b.get("text", "")) if isinstance(b, dict) and b.get("type") == "text"
             else _label(b) for b in content]
    return "\n".join(texts)


def _tool_message(block: Block) -> Message:
    message: Message = {"role": "tool", "tool_call_id": block.get("tool_use_id"),
                        "content": _tool_result_text(block)}
    if _bare(_rebuilt_result(message)) != _bare(block):  # is_error, images, documents, lists
        whole = isinstance(block.get("content"), list)
        message[KEPT] = [copy_json(block) if whole else
                         {k: v for k, v in block.items() if k != "content"}]
    return message


def _user_messages(content: list[Block], index: int) -> list[Message]:
    out: list[Message] = []
    parts: list[dict[str, Any]] = []
    for block in content:
        if block.get("type") == "tool_result":
            out.append(_tool_message(block))
        else:
            parts.append(_block_to_part(block, index))
    if parts:
        out.append({"role": "user", "content": _openai_content(parts)})
    return out


def _arguments(value: Any) -> str:
    if isinstance(value, dict) and set(value) == {RAW_ARGUMENTS}:
        return str(value[RAW_ARGUMENTS])
    return json.dumps(value if value is not None else {}, ensure_ascii=False)


def _bare(block: Any) -> Any:
    """A block as compared with its chat form's: keys with a None value left out."""
    return {k: v for k, v in block.items() if v is not None} if isinstance(block, dict) \
        else block


def _assistant_message(content: list[Block], index: int, keep: bool = True) -> Message:
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
        elif server_block(block):
            parts.append({"type": "text", "text": _server_text(block)})
        elif kind == "text":  # (its citations, if any, are kept with the blocks)
            parts.append({"type": "text", "text": str(block.get("text", ""))})
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
    if keep and [_bare(b) for b in _assistant_blocks(message, index, False)] != \
            [_bare(b) for b in content]:
        message[KEPT] = copy_json(content)
    return message


def system_text(system: str | Sequence[Block] | None) -> str:
    if system is None or isinstance(system, str):
        return system or ""
    if not isinstance(system, list) or not all(isinstance(b, dict) for b in system):
        raise MessageValidationError("system must be a string or a list of text blocks",
                                     field="system")
    return "\n\n".join(str(b.get("text", "")) for b in system if b.get("type") == "text")


class _Converted:
    """Assistant turns converted already, by the ``repr`` of their blocks: a client of the
    proxy re-sends every earlier turn with each request, and a JSON value's ``repr`` is
    exact (its types, values and key order), so a turn seen before is converted once and
    copied after (~2 against ~6 us). Bounded by entries and characters; keys of over
    ``LONGEST`` characters are not kept."""

    ENTRIES = 4096
    CHARS = 2_000_000
    LONGEST = 32_768

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.held: OrderedDict[str, Message] = OrderedDict()
        self.chars = 0

    def assistant(self, content: list[Block], index: int) -> Message:
        key = repr(content)
        with self.lock:
            found = self.held.get(key)
            if found is not None:
                self.held.move_to_end(key)
        if found is not None:
            return copy_json(found)
        message = _assistant_message(content, index)
        if len(key) <= self.LONGEST:
            with self.lock:
                if key not in self.held:
                    self.held[key] = copy_json(message)
                    self.chars += len(key)
                while len(self.held) > self.ENTRIES or self.chars > self.CHARS:
                    self.chars -= len(self.held.popitem(last=False)[0])
        return message


_CONVERTED = _Converted()


class _Prefixes:
    """The last requests' conversions, each message's chat messages apart: an agent re-sends
    its whole conversation with each request, so all of it but the newest turns is what the
    previous request held. A request whose first messages are exactly (``jsonscan.prefix``:
    types and key order too) those of one held here takes their chat messages as copies and
    converts only the rest (``chat_request`` of an agent's 300-message request, in process:
    ~0.4 ms against ~1.0 ms). Used only with the C comparison (``jsonscan.native()``): in
    Python, comparing costs about what converting does. Bounded: ``ENTRIES`` requests, ``CHARS`` characters in all (each
    message's ``repr``, measured once when it is first converted)."""

    ENTRIES = 16
    CHARS = 8_000_000

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.held: list[_Held] = []  # the last used last

    def find(self, messages: Sequence[Any]) -> tuple[int, _Held | None]:
        """How many of ``messages`` lead a held request exactly, and that request."""
        if not messages:
            return 0, None
        with self.lock:
            held = list(self.held)
        wanted = messages if isinstance(messages, list) else list(messages)
        best: tuple[int, _Held | None] = (0, None)
        for entry in reversed(held):
            count = prefix(entry.raw, wanted)
            if count > best[0]:
                best = (count, entry)
            if count == len(entry.raw):  # all of it: the conversation's previous request
                break
        return best

    def keep(self, entry: _Held, replaces: _Held | None) -> None:
        """Hold this request's conversion (in place of ``replaces``, the one it extended)."""
        with self.lock:
            held = [e for e in self.held if e is not replaces]
            held.append(entry)
            total = sum(e.chars for e in held)
            while held and (len(held) > self.ENTRIES or total > self.CHARS):
                total -= held.pop(0).chars
            self.held = held


@dataclass
class _Held:
    """One request's messages, each one's chat messages and size (``repr`` characters)."""

    raw: list[Any]
    groups: list[list[Message]]
    sizes: list[int]
    chars: int


_PREFIXES = _Prefixes()


def _chat_of(turn: Any, index: int, memo: bool) -> list[Message]:
    """One Anthropic message's chat messages (a user turn's tool results are one each)."""
    turn = as_plain(turn)  # the anthropic SDK's Message, as its API sent it
    if not isinstance(turn, dict):
        raise MessageValidationError("an Anthropic message must be an object", index=index)
    role, content = turn.get("role"), turn.get("content")
    if isinstance(content, list):  # the SDK's blocks: {"role": "assistant", "content":
        content = [as_plain(block) for block in content]  # response.content}, as its docs
    if role not in ("user", "assistant", "system"):
        raise MessageValidationError(f"Anthropic role must be user, assistant or system, "
                                     f"not {role!r}", index=index, field="role")
    if role == "system":  # a system turn inside the conversation (Claude Code 2.1 sends one)
        return [{"role": "system", "content": system_text(content)}]
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list) or not all(isinstance(b, dict) for b in content):
        raise MessageValidationError("content must be a string or a list of block objects",
                                     index=index, field="content")
    if role == "user":
        return _user_messages(content, index)
    return [_CONVERTED.assistant(content, index) if memo
            else _assistant_message(content, index)]


def from_anthropic(messages: Sequence[dict[str, Any]], *,
                   system: str | Sequence[Block] | None = None,
                   memo: bool = False) -> list[Message]:
    """Convert Anthropic ``messages`` (and the top-level ``system``) to the OpenAI form.
    ``memo``: the messages are JSON values (a decoded request body): the part of them a recent
    request began with exactly is taken from that request's conversion (``_Prefixes``), and
    an assistant turn converted before in this process from ``_Converted``. What is returned
    is the caller's own (copies: nothing held is handed out)."""
    out: list[Message] = []
    text = system_text(system)
    if text:
        out.append({"role": "system", "content": text})
    if not (memo and native()):
        for index, turn in enumerate(messages):
            out += _chat_of(turn, index, memo)
        return out
    start, held = _PREFIXES.find(messages)
    # what is held is the memo's own (copies): nothing the caller has reaches it
    raw = held.raw[:start] if held is not None else []
    groups = held.groups[:start] if held is not None else []
    sizes = held.sizes[:start] if held is not None else []
    for group in groups:
        out += [copy_json(message) for message in group]
    for index in range(start, len(messages)):
        group = _chat_of(messages[index], index, True)
        raw.append(copy_json(messages[index]))
        groups.append([copy_json(message) for message in group])
        sizes.append(len(repr(messages[index])))
        out += group
    _PREFIXES.keep(_Held(raw, groups, sizes, sum(sizes)), held)
    return out
