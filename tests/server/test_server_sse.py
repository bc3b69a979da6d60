"""The SSE splitter and the delta assembler the proxy records streamed replies with."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from refold.errors import StorageError
from refold.llm.sse import DONE, EventSplitter, StreamAssembler, parse_chunk
from refold.server.completions import ProxyStream


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


def _by_loads(data: str) -> Any:
    try:
        value = json.loads(data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


@settings(max_examples=300, deadline=None)
@given(st.one_of(
    st.text(),
    st.recursive(st.none() | st.booleans() | st.floats() | st.text(), lambda inner:
                 st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
                 max_leaves=8).map(json.dumps),
    st.tuples(st.sampled_from(["", " ", "\n", "x", "}", "{}"]),
              st.dictionaries(st.text(), st.integers(), max_size=3).map(json.dumps),
              st.sampled_from(["", " ", "\n", "x", "}", "{}"])).map("".join)))
def test_parse_chunk_says_what_json_loads_says(data: str) -> None:
    """The scanner shortcut: any text gives what ``json.loads`` gives (whitespace around a
    value, trailing garbage, two values, NaN, non-objects, lone surrogates)."""
    assert repr(parse_chunk(data)) == repr(_by_loads(data))


def test_text_only_deltas_take_the_short_path_and_others_still_fold() -> None:
    asm = StreamAssembler()
    for delta in ({"role": "assistant", "content": ""}, {"content": "a"},
                  {"content": "b", "reasoning_content": "r"},
                  {"content": "c", "tool_calls": [{"index": 0, "id": "t", "function": {
                      "name": "f", "arguments": "{}"}}]},
                  {"role": "assistant", "content": "d", "thinking_blocks": [{"type": "x"}]}):
        asm.add({"choices": [{"index": 0, "delta": delta}]})
    assert asm.message() == {
        "role": "assistant", "content": "abcd", "reasoning_content": "r",
        "tool_calls": [{"id": "t", "type": "function", "function": {"name": "f",
                                                                  "arguments": "{}"}}],
        "thinking_blocks": [{"type": "x"}]}


# -- how ProxyStream frames the end of a stream ---------------------------------------------------
class _Upstream:
    """An upstream stream whose body arrives in the given reads."""

    def __init__(self, reads: list[bytes]) -> None:
        self.reads = reads
        self.closed = False

    async def chunks(self) -> Any:
        for data in self.reads:
            yield data

    async def aclose(self) -> None:
        self.closed = True


class _Turn:
    """What ProxyStream needs of a turn: ``record`` (failing when told), ``finish``."""

    session_id = "s1"
    inject_usage = False

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.log: list[str] = []

    def headers(self) -> dict[str, str]:
        return {"X-Refold-Session": self.session_id}

    async def record(self, assembler: StreamAssembler) -> None:
        self.log.append(f"record:{assembler.message().get('content')}")
        if self.fail:
            raise StorageError("disk full")

    def finish(self) -> None:
        self.log.append("finish")

    async def unanswered(self) -> None:  # the turn's stored messages got no reply
        self.log.append("unanswered")


def _pumped(turn: _Turn, reads: list[bytes]) -> list[dict[str, Any]]:
    """The ASGI messages ProxyStream sends for an upstream body arriving in ``reads``."""
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        await asyncio.Event().wait()  # the client never leaves
        return {}

    async def main() -> None:
        released: list[bool] = []
        stream = ProxyStream(turn, _Upstream(reads), lambda: released.append(True))  # type: ignore[arg-type]
        await stream({"type": "http"}, receive, send)
        assert released == [True]

    asyncio.run(main())
    return sent


FINISH = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
HELLO = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hello"}}]}


def test_the_events_that_came_with_the_upstream_done_leave_with_ours_in_one_write() -> None:
    """The finish chunk shares the upstream's last read with its [DONE]: it is held until the
    reply is recorded, then goes out with the proxy's [DONE] in one body message (one write);
    earlier events went out as they came."""
    turn = _Turn()
    sent = _pumped(turn, [_event(HELLO), _event(FINISH) + b"data: [DONE]\n\n"])
    bodies = [m for m in sent if m["type"] == "http.response.body"]
    assert [m["body"] for m in bodies] == [_event(HELLO), _event(FINISH) + b"data: [DONE]\n\n"]
    assert [m["more_body"] for m in bodies] == [True, False]
    assert turn.log == ["record:Hello", "finish"]


def test_a_failed_record_still_delivers_the_held_events_then_the_error_without_done() -> None:
    turn = _Turn(fail=True)
    sent = _pumped(turn, [_event(HELLO), _event(FINISH) + b"data: [DONE]\n\n"])
    last = [m for m in sent if m["type"] == "http.response.body"][-1]
    assert last["more_body"] is False
    assert last["body"].startswith(_event(FINISH) + b"data: {\"error\"")
    assert b"[DONE]" not in last["body"]
    assert turn.log == ["record:Hello"]  # not acknowledged: no after-turn work


def test_events_after_a_finish_in_an_earlier_read_still_stream_as_they_come() -> None:
    """Without the upstream's [DONE] in a read, its events are forwarded at once."""
    turn = _Turn()
    sent = _pumped(turn, [_event(HELLO), _event(FINISH), b"data: [DONE]\n\n"])
    bodies = [m["body"] for m in sent if m["type"] == "http.response.body"]
    assert bodies == [_event(HELLO), _event(FINISH), b"data: [DONE]\n\n"]


def test_an_event_that_is_not_json_is_not_passed_on_the_stream_fails_saying_why() -> None:
    """``data: {not json`` went to the client as it came, and the client's SDK failed on it
    (JSONDecodeError) before the proxy's error event; it is now held back and the stream ends
    with one error event, nothing recorded."""
    turn = _Turn()
    sent = _pumped(turn, [_event(HELLO), b"data: {not json\n\n", _event(FINISH)])
    bodies = [m["body"] for m in sent if m["type"] == "http.response.body"]
    assert bodies[0] == _event(HELLO)
    assert b"not json" not in b"".join(bodies)
    error = json.loads(bodies[-1].decode().removeprefix("data: "))
    assert "not a JSON object" in error["error"]["message"]
    assert b"[DONE]" not in b"".join(bodies) and turn.log == ["unanswered"]


def test_the_upstreams_own_error_event_is_the_only_one() -> None:
    """An error event from the upstream is passed on as it is and ends the stream: no second
    error event of the proxy's after it (the client got two)."""
    turn = _Turn()
    upstream_error = {"error": {"message": "model overloaded", "type": "server_error"}}
    sent = _pumped(turn, [_event(HELLO), _event(upstream_error)])
    bodies = [m["body"] for m in sent if m["type"] == "http.response.body"]
    assert b"".join(bodies).count(b'"error"') == 1
    assert _event(upstream_error) in b"".join(bodies)
    assert [m["more_body"] for m in sent if m["type"] == "http.response.body"][-1] is False
    assert turn.log == ["unanswered"]  # nothing recorded; the turn is marked unanswered


def test_a_stream_cut_off_before_its_finish_marks_the_turn_unanswered() -> None:
    """The upstream's body ends mid-reply: an error event, nothing recorded, and the turn's
    stored messages are marked as unanswered (a client that goes on without them rewinds them
    instead of forking a branch: ``tests/server/test_proxy_dropped_turns.py``)."""
    turn = _Turn()
    sent = _pumped(turn, [_event(HELLO)])
    bodies = [m["body"] for m in sent if m["type"] == "http.response.body"]
    assert b"finish_reason" in bodies[-1] and b"[DONE]" not in b"".join(bodies)
    assert turn.log == ["unanswered"]


def test_event_data_forms() -> None:
    """One ``data: `` line (the fast path) and every other form read the same payloads."""
    stream = (b'data: {"a": 1}\n\n'  # the usual event
              b"data:no-space\n\n"
              b"data: first\ndata: second\n\n"  # several data lines join with LF
              b": a comment\ndata: after comment\n\n"
              b"event: ping\n\n"  # no data at all
              b"data: \xc3\xa9t\xc3\xa9\n\n"
              b"data: data: nested\n\n")
    for size in (1, 3, len(stream)):  # events cut anywhere across reads
        splitter = EventSplitter()
        events = [e for i in range(0, len(stream), size) for e in splitter.feed(stream[i:i + size])]
        assert [e.data for e in events] == ['{"a": 1}', "no-space", "first\nsecond",
                                            "after comment", None, "été", "data: nested"]
        assert b"".join(e.raw for e in events) == stream
        assert splitter.rest() == b""
