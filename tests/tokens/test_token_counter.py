"""Message accounting: overheads, tool calls, schemas, images, caching."""

from __future__ import annotations

import json

from refold.tokens import (
    IMAGE_TOKENS,
    REPLY_PRIMING,
    EstimateCounter,
    ExactCounter,
    TokenCounter,
    load_encoding,
)


def test_exact_counter_matches_vocabulary() -> None:
    counter = ExactCounter("cl100k_base")
    assert isinstance(counter, TokenCounter)
    text = "Hello, world! <|endoftext|> 你好"
    assert counter.count_text(text) == len(load_encoding("cl100k_base").encode_ordinary(text))
    assert counter.decode(counter.encode("abc def")) == "abc def"


def test_message_costs_include_overhead_calls_and_images() -> None:
    counter = ExactCounter("o200k_base")
    plain = {"role": "user", "content": "list the files"}
    base = counter.count_message(plain)
    assert base > counter.count_text("list the files")
    args = json.dumps({"path": "/srv/app", "recursive": True})
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": args}}]}
    assert counter.count_message(call) >= counter.count_text(args) + counter.count_text("ls")
    image = {"role": "user", "content": [
        {"type": "text", "text": "list the files"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 50_000}}]}
    assert counter.count_message(image) == base + IMAGE_TOKENS
    msgs = [plain, call, image]
    assert counter.count_messages(msgs) == sum(map(counter.count_message, msgs)) + REPLY_PRIMING
    assert counter.count_messages([]) == REPLY_PRIMING


def test_tool_schemas_are_counted() -> None:
    counter = EstimateCounter()
    tools = [{"type": "function", "function": {"name": "read_file", "description": "Read a file",
              "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]
    assert counter.count_tools(None) == 0
    assert counter.count_tools(tools) > counter.count_text("read_file Read a file")


def test_cache_makes_a_turn_cost_only_new_messages() -> None:
    counter = EstimateCounter()
    history = [{"role": "user" if i % 2 else "assistant", "content": f"message number {i}"}
               for i in range(200)]
    counter.count_messages(history)
    assert counter.cache_misses == 200
    # the next turn re-sends the history (new dict objects, same content) plus one message
    resent = [dict(m) for m in history] + [{"role": "user", "content": "new"}]
    counter.count_messages(resent)
    assert counter.cache_misses == 201
    # a changed message is recounted, not served stale
    resent[5] = {"role": resent[5]["role"], "content": "edited"}
    before = counter.count_message(resent[5])
    assert counter.cache_misses == 202 and before == counter.count_message(resent[5])
