"""The SSE splitter and the delta assembler the proxy records streamed replies with."""

from __future__ import annotations

import json

from refold.server.sse import DONE, EventSplitter, StreamAssembler, parse_chunk


def _event(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def test_events_cut_anywhere_come_out_whole() -> None:
    stream = _event({"a": 1}) + b": keep-alive\n\n" + _event({"b": "two"}) + b"data: [DONE]\n\n"
    for cut in range(1, len(stream)):
        splitter = EventSplitter()
        events = [*splitter.feed(stream[:cut]), *splitter.feed(stream[cut:])]
        assert [e.data for e in events] == ['{"a": 1}', None, '{"b": "two"}', DONE]
        assert b"".join(e.raw for e in events) == stream
        assert splitter.rest() == b""


def test_crlf_events_split_even_when_the_crlf_is_cut() -> None:
    stream = b'data: {"x": 1}\r\n\r\ndata: [DONE]\r\n\r\n'
    for cut in range(1, len(stream)):
        splitter = EventSplitter()
        events = [*splitter.feed(stream[:cut]), *splitter.feed(stream[cut:])]
        assert [e.data for e in events] == ['{"x": 1}', DONE]


def test_an_unfinished_event_is_left_over() -> None:
    splitter = EventSplitter()
    assert list(splitter.feed(b'data: {"half"')) == []
    assert splitter.rest() == b'data: {"half"'


def test_assembler_merges_content_reasoning_and_tool_call_deltas() -> None:
    asm = StreamAssembler()
    chunks = [
        {"model": "m1", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
        {"choices": [{"index": 0, "delta": {"reasoning_content": "think "}}]},
        {"choices": [{"index": 0, "delta": {"content": "Hel"}}]},
        {"choices": [{"index": 0, "delta": {"content": "lo"}}]},
        {"choices": [{"index": 1, "delta": {"content": "other choice ignored"}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "id": "c1", "type": "function",
             "function": {"name": "read", "arguments": '{"pa'}}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 1, "id": "c2", "function": {"name": "ls", "arguments": "{}"}},
            {"index": 0, "function": {"arguments": 'th": "a"}'}}]}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}},
    ]
    for chunk in chunks:
        assert not asm.complete or chunk.get("usage")
        asm.add(chunk)
    assert asm.complete
    assert asm.usage == {"prompt_tokens": 5, "completion_tokens": 2}
    assert asm.model == "m1"
    assert asm.message() == {
        "role": "assistant", "content": "Hello", "reasoning_content": "think ",
        "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "read", "arguments": '{"path": "a"}'}},
            {"id": "c2", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]}


def test_empty_stream_gives_empty_content_and_is_not_complete() -> None:
    asm = StreamAssembler()
    assert not asm.complete
    assert asm.message() == {"role": "assistant", "content": None}


def test_parse_chunk_refuses_non_objects() -> None:
    assert parse_chunk("not json") is None
    assert parse_chunk("[1, 2]") is None
    assert parse_chunk('{"a": 1}') == {"a": 1}
