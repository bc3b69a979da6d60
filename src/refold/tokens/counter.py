"""The ``TokenCounter`` seam and the message accounting every counter shares.

A counter turns text into a token count; ``MessageCounter`` adds what a chat request costs on
top of the text: a per-message overhead, tool-call names and arguments, tool schemas, and a
fixed cost per image. Counts are cached per message under a cheap fingerprint (role, lengths
and hashes of the strings — Python caches a ``str``'s hash on the object, so an unchanged history
costs O(1) per message to look up), which makes a turn cost O(new messages), not O(history).

Invariant: ``count_messages(ms) == sum(count_message(m) for m in ms) + REPLY_PRIMING``.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from refold.messages.model import Message, content_text

MESSAGE_OVERHEAD = 4  # role markers and separators per message (OpenAI's documented 3-4)
REPLY_PRIMING = 3  # every reply is primed with <|start|>assistant<|message|>
IMAGE_TOKENS = 765  # a 1024x1024 high-detail image; a fixed cost, whatever the pixels
TOOL_SCHEMA_OVERHEAD = 12  # the wrapper text a provider puts around the tools block
DEFAULT_CACHE_ENTRIES = 16_384  # counts kept per counter (LRU); ~4 MiB at most


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens of text, messages and tool schemas for one model family."""

    name: str
    exact: bool

    def count_text(self, text: str) -> int: ...
    def count_message(self, message: Message) -> int: ...
    def count_messages(self, messages: Sequence[Message]) -> int: ...
    def count_tools(self, tools: Sequence[dict[str, Any]] | None) -> int: ...


# made once (``json.dumps`` with options builds an encoder per call)
_KEY_JSON = json.JSONEncoder(sort_keys=True, ensure_ascii=False, default=str).encode


def _string_key(value: Any) -> Any:
    if isinstance(value, str):
        return (len(value), hash(value))
    if value is None:
        return None
    return hash(_KEY_JSON(value))


def message_fingerprint(message: Message) -> tuple[Any, ...]:
    """A cheap cache key for a message's countable content (not a content hash for storage)."""
    if len(message) == 2:  # the usual chat message, {"role", "content": text}: the same key
        content = message.get("content")
        if type(content) is str and "role" in message:
            return (message["role"], (len(content), hash(content)), (), None, None, None)
    calls = tuple(
        (_string_key((c.get("function") or {}).get("name")),
         _string_key((c.get("function") or {}).get("arguments")), _string_key(c.get("id")))
        for c in message.get("tool_calls") or [])
    return (message.get("role"), _string_key(message.get("content")), calls,
            _string_key(message.get("name")), _string_key(message.get("tool_call_id")),
            _string_key(message.get("reasoning_content")))


def image_count(message: Message) -> int:
    content = message.get("content")
    if not isinstance(content, list):
        return 0
    return sum(1 for p in content if isinstance(p, dict)
               and p.get("type") in ("image_url", "input_image", "image"))


class MessageCounter:
    """Base for counters: subclasses provide ``count_text``; this adds messages, tools, cache."""

    name = "abstract"
    exact = False
    # the LRU of message counts holds at most this many entries, for every counter (a long-lived
    # process counting ever new messages stays bounded; set with ``set_cache_entries``)
    cache_entries = DEFAULT_CACHE_ENTRIES

    def __init__(self, *, image_tokens: int = IMAGE_TOKENS,
                 message_overhead: int = MESSAGE_OVERHEAD) -> None:
        self.image_tokens = image_tokens
        self.message_overhead = message_overhead
        self._cache: OrderedDict[tuple[Any, ...], int] = OrderedDict()
        self._lock = threading.Lock()
        self.cache_hits = 0
        self.cache_misses = 0

    def count_text(self, text: str) -> int:
        raise NotImplementedError

    def _uncached_message(self, message: Message) -> int:
        total = self.message_overhead + self.count_text(content_text(message))
        total += image_count(message) * self.image_tokens
        for call in message.get("tool_calls") or []:
            fn = call.get("function") or {}
            total += 3 + self.count_text(str(fn.get("name") or ""))
            total += self.count_text(str(fn.get("arguments") or ""))
        for key in ("name", "tool_call_id", "reasoning_content"):
            value = message.get(key)
            if isinstance(value, str) and value:
                total += 1 + self.count_text(value)
        return total

    def count_message(self, message: Message) -> int:
        key = message_fingerprint(message)
        with self._lock:  # counters are shared per vocabulary across threads (the proxy)
            cached = self._cache.get(key)
            if cached is not None:
                self.cache_hits += 1
                self._cache.move_to_end(key)
                return cached
            self.cache_misses += 1
        value = self._uncached_message(message)
        with self._lock:
            self._cache[key] = value
            while len(self._cache) > MessageCounter.cache_entries:
                self._cache.popitem(last=False)
        return value

    def count_messages(self, messages: Sequence[Message]) -> int:
        return sum(self.count_message(m) for m in messages) + REPLY_PRIMING

    def count_tools(self, tools: Sequence[dict[str, Any]] | None) -> int:
        if not tools:
            return 0
        text = json.dumps(list(tools), sort_keys=True, ensure_ascii=False, default=str)
        return TOOL_SCHEMA_OVERHEAD + self.count_text(text)

    def count_request(self, messages: Sequence[Message],
                      tools: Sequence[dict[str, Any]] | None = None) -> int:
        """What a whole request costs: messages, reply priming and tool schemas."""
        return self.count_messages(messages) + self.count_tools(tools)


def set_cache_entries(entries: int) -> None:
    """Bound every counter's cache of message counts to ``entries`` (0: no cache). A cache
    above the new bound shrinks on its next insert."""
    if entries < 0:
        raise ValueError("cache entries must be 0 or more")
    MessageCounter.cache_entries = entries
