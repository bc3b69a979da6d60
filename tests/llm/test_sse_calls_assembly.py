"""``StreamAssembler``: streamed tool-call deltas folded into calls, also from servers that
send them without an ``index`` or repeat the name in every fragment."""

from __future__ import annotations

import json
from typing import Any

from refold.llm.sse import StreamAssembler


def chunk(*calls: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    delta: dict[str, Any] = {"tool_calls": list(calls)} if calls else {}
    return {"object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def call(call_id: str | None = None, name: str | None = None, arguments: str = "",
         index: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"function": {"arguments": arguments}}
    if call_id is not None:
        out["id"], out["type"] = call_id, "function"
    if name is not None:
        out["function"]["name"] = name
    if index is not None:
        out["index"] = index
    return out


def calls_of(*chunks: dict[str, Any]) -> list[tuple[str, str, Any]]:
    folded = StreamAssembler()
    for c in chunks:
        folded.add(c)
    return [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in folded.message()["tool_calls"]]


def test_calls_without_an_index_each_whole_in_its_chunk_stay_apart() -> None:
    # as Gemini's OpenAI-compatible layer streams them: no index, a new id per call
    assert calls_of(chunk(call("call_1", "read", '{"path": "a.py"}')),
                    chunk(call("call_2", "read", '{"path": "b.py"}')),
                    chunk(finish="tool_calls")) == [
        ("call_1", "read", {"path": "a.py"}), ("call_2", "read", {"path": "b.py"})]


def test_a_fragment_without_index_or_id_continues_the_last_call() -> None:
    assert calls_of(chunk(call("call_1", "read", '{"pa')),
                    chunk(call(arguments='th": "a.py"}')),
                    chunk(call("call_2", "write", '{"path"')),
                    chunk(call(arguments=': "b.py"}')),
                    chunk(finish="tool_calls")) == [
        ("call_1", "read", {"path": "a.py"}), ("call_2", "write", {"path": "b.py"})]


def test_two_calls_without_index_in_one_delta_are_two_calls() -> None:
    assert calls_of(chunk(call(name="read", arguments="{}"), call(name="grep", arguments="{}")),
                    chunk(finish="tool_calls"))[1][1:] == ("grep", {})


def test_a_name_repeated_in_every_fragment_is_kept_once() -> None:
    assert calls_of(chunk(call("call_R1", "read", '{"path": ', index=0)),
                    chunk(call("call_R1", "read", '"a.py"}', index=0)),
                    chunk(finish="tool_calls")) == [("call_R1", "read", {"path": "a.py"})]


def test_indexed_interleaved_fragments_are_folded_by_index() -> None:
    assert calls_of(chunk(call("call_F1", "read", "", index=0)),
                    chunk(call(arguments='{"pa', index=0)),
                    chunk(call("call_F2", "read", '{"path"', index=1)),
                    chunk(call(arguments='th": "a.py"}', index=0)),
                    chunk(call(arguments=': "b.py"}', index=1)),
                    chunk(finish="tool_calls")) == [
        ("call_F1", "read", {"path": "a.py"}), ("call_F2", "read", {"path": "b.py"})]
