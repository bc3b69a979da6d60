"""Streamed tool calls and failures on the translated endpoints (``/v1/messages``,
``/v1/responses``), with the official SDKs as clients, against an upstream that streams tool
calls as real OpenAI-compatible servers do: without an ``index`` (each call whole in its own
chunk), with the name repeated in every fragment, parallel calls interleaved, or a connection
that drops mid-reply. And an upstream 200 whose message cannot be stored: a 502."""

from __future__ import annotations

import json
import socket
import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import anthropic
import httpx
import openai
import pytest

from refold.store import Store
from refold.testing import RunningLLM, ScriptedReply, llm_server, serve

ProxyFactory = Callable[..., Any]
MODEL = "scripted-model"
READ_A = '{"path": "a.py"}'
READ_B = '{"path": "b.py"}'


def _call(arguments: str, index: int | None = None, call_id: str | None = None,
          name: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"function": {"arguments": arguments}}
    if index is not None:
        out["index"] = index
    if call_id is not None:
        out["id"], out["type"] = call_id, "function"
    if name is not None:
        out["function"]["name"] = name
    return out


# each script: the deltas of one streamed reply (the finish_reason chunk follows)
SCRIPTS: dict[str, list[dict[str, Any]]] = {
    # Gemini's OpenAI-compatible layer: each call whole, in its own chunk, no index
    "noindex": [{"tool_calls": [_call(READ_A, call_id="call_N1", name="read")]},
                {"tool_calls": [_call(READ_B, call_id="call_N2", name="read")]}],
    # id and name repeated in every fragment of the call
    "name_each": [{"tool_calls": [_call('{"path": ', 0, "call_R1", "read")]},
                  {"tool_calls": [_call('"a.py"}', 0, "call_R1", "read")]}],
    # two parallel calls whose argument fragments interleave: 0, 1, 0, 1
    "interleaved": [{"content": "Let me "}, {"content": "check."},
                    {"tool_calls": [_call("", 0, "call_F1", "read")]},
                    {"tool_calls": [_call('{"pa', 0)]},
                    {"tool_calls": [_call('{"path"', 1, "call_F2", "read")]},
                    {"tool_calls": [_call('th": "a.py"}', 0)]},
                    {"tool_calls": [_call(': "b.py"}', 1)]}],
    # the usual way: one call after the other
    "sequential": [{"tool_calls": [_call("", 0, "call_S1", "read")]},
                   {"tool_calls": [_call('{"pa', 0)]},
                   {"tool_calls": [_call('th": "a.py"}', 0)]},
                   {"tool_calls": [_call('{"path"', 1, "call_S2", "read")]},
                   {"tool_calls": [_call(': "b.py"}', 1)]}],
    # a call without an id: not a reply the ledger can store
    "noid": [{"tool_calls": [_call("{}", 0, name="read")]}],
    # text, then the connection drops (no finish_reason, no [DONE])
    "drop": [{"content": "partial "}, {"content": "answer"}],
}


def script(name: str) -> ScriptedReply:
    return ScriptedReply(content=f"script:{name}")


class _Handler(llm_server._Handler):
    """The scripted server's handler; a reply whose content is ``script:<name>`` streams
    ``SCRIPTS[name]`` instead."""

    def _stream(self, body: dict[str, Any], reply: ScriptedReply) -> None:
        name = (reply.content or "").removeprefix("script:")
        if name not in SCRIPTS:
            super()._stream(body, reply)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        base = {"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 0,
                "model": MODEL}
        deltas = [{"role": "assistant", "content": None}, *SCRIPTS[name]]
        for delta in deltas:
            self._chunk(dict(base, choices=[{"index": 0, "delta": delta,
                                             "finish_reason": None}]))
        if name == "drop":
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            self.connection.close()
            return
        self._chunk(dict(base, choices=[{"index": 0, "delta": {},
                                         "finish_reason": "tool_calls"}]))
        if (body.get("stream_options") or {}).get("include_usage"):
            self._chunk(dict(base, choices=[], usage={"prompt_tokens": 10,
                                                     "completion_tokens": 5,
                                                     "total_tokens": 15}))
        self._write_chunk(b"data: [DONE]\n\n")
        self._write_chunk(b"")


class _Running(RunningLLM):
    def __init__(self, replies: list[Any]) -> None:  # RunningLLM's, with this handler
        self.llm = llm_server.ScriptedLLM(replies=deque(replies))
        self._server = llm_server._Server(("127.0.0.1", 0), _Handler)
        self._server.llm = self.llm
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()


@contextmanager
def upstream(*replies: Any) -> Iterator[RunningLLM]:
    running = _Running(list(replies))
    try:
        yield running
    finally:
        running.close()


def claude(root: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=root, api_key="none", max_retries=0, timeout=30)


def gpt(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="none", max_retries=0, timeout=30)


CLAUDE_TOOLS: Any = [{"name": "read", "input_schema": {"type": "object"}}]
GPT_TOOLS: Any = [{"type": "function", "name": "read", "parameters": {"type": "object"}}]


def stored_calls(store: Store) -> list[list[tuple[str, str, str]]]:
    """The tool calls of each stored assistant message, session by session."""
    out = []
    for session in store.list_sessions():
        for row in store.get_messages(session.id):
            if row.message["role"] == "assistant":
                out.append([(c["id"], c["function"]["name"], c["function"]["arguments"])
                            for c in row.message.get("tool_calls") or []])
    return out


def sse_events(url: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    with httpx.stream("POST", url, json=body, timeout=30) as reply:
        return [json.loads(line[6:]) for line in reply.iter_lines()
                if line.startswith("data: ")]


# -- 1. calls without an index, names repeated -------------------------------------------------

def test_calls_without_index_reach_each_client_and_the_ledger_apart(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    with upstream(script("noindex"), script("noindex")) as up:
        proxy = start_proxy(up)
        with claude(proxy.root).messages.stream(
                model=MODEL, max_tokens=50, tools=CLAUDE_TOOLS,
                messages=[{"role": "user", "content": "read both (messages)"}]) as stream:
            message = stream.get_final_message()
        with gpt(proxy.base_url).responses.stream(model=MODEL, input="read both (responses)",
                                                  tools=GPT_TOOLS) as events:
            response = events.get_final_response()
    assert [(b.id, b.name, b.input) for b in message.content if b.type == "tool_use"] == [
        ("call_N1", "read", {"path": "a.py"}), ("call_N2", "read", {"path": "b.py"})]
    assert [(o.call_id, o.name, o.arguments) for o in response.output
            if o.type == "function_call"] == [("call_N1", "read", READ_A),
                                              ("call_N2", "read", READ_B)]
    assert stored_calls(sqlite_store) == [[("call_N1", "read", READ_A),
                                           ("call_N2", "read", READ_B)]] * 2


def test_a_name_repeated_in_every_fragment_is_stored_and_sent_once(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    with upstream(script("name_each"), script("name_each")) as up:
        proxy = start_proxy(up)
        with claude(proxy.root).messages.stream(
                model=MODEL, max_tokens=50, tools=CLAUDE_TOOLS,
                messages=[{"role": "user", "content": "read (messages)"}]) as stream:
            message = stream.get_final_message()
        with gpt(proxy.base_url).responses.stream(model=MODEL, input="read (responses)",
                                                  tools=GPT_TOOLS) as events:
            response = events.get_final_response()
    assert [(b.name, b.input) for b in message.content if b.type == "tool_use"] == [
        ("read", {"path": "a.py"})]
    assert [(o.name, o.arguments) for o in response.output
            if o.type == "function_call"] == [("read", READ_A)]
    assert len(response.output) == 1
    assert stored_calls(sqlite_store) == [[("call_R1", "read", READ_A)]] * 2


# -- 2. /v1/messages: interleaved parallel calls -----------------------------------------------

def _blocks(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The content blocks the events spell, checking that blocks do not interleave."""
    blocks: list[dict[str, Any]] = []
    open_index = None
    for event in events:
        kind = event["type"]
        if kind == "content_block_start":
            assert open_index is None, f"block {event['index']} opened inside {open_index}"
            open_index = event["index"]
            assert open_index == len(blocks)
            blocks.append(dict(event["content_block"], partial=""))
        elif kind == "content_block_delta":
            assert event["index"] == open_index, event
            delta = event["delta"]
            if delta["type"] == "input_json_delta":
                blocks[-1]["partial"] += delta["partial_json"]
            elif delta["type"] == "text_delta":
                blocks[-1]["text"] += delta["text"]
        elif kind == "content_block_stop":
            assert event["index"] == open_index, event
            open_index = None
    assert open_index is None
    return blocks


@pytest.mark.parametrize("name", ["interleaved", "sequential"])
def test_parallel_calls_come_as_whole_tool_use_blocks(start_one_proxy: ProxyFactory,
                                                      name: str) -> None:
    with upstream(script(name), script(name)) as up:
        proxy = start_one_proxy(up)
        body = {"model": MODEL, "max_tokens": 50, "stream": True, "tools": CLAUDE_TOOLS,
                "messages": [{"role": "user", "content": "read two (raw)"}]}
        events = sse_events(proxy.root + "/v1/messages", body)
        with claude(proxy.root).messages.stream(
                model=MODEL, max_tokens=50, tools=CLAUDE_TOOLS,
                messages=[{"role": "user", "content": "read two (sdk)"}]) as stream:
            message = stream.get_final_message()
    prefix = "call_F" if name == "interleaved" else "call_S"
    uses = [(b["id"], b["name"], json.loads(b["partial"])) for b in _blocks(events)
            if b["type"] == "tool_use"]
    assert uses == [(prefix + "1", "read", {"path": "a.py"}),
                    (prefix + "2", "read", {"path": "b.py"})]
    assert events[-1]["type"] == "message_stop"
    assert [(b.id, b.input) for b in message.content if b.type == "tool_use"] == [
        (prefix + "1", {"path": "a.py"}), (prefix + "2", {"path": "b.py"})]
    assert message.stop_reason == "tool_use"
    if name == "interleaved":
        assert message.content[0].type == "text" and message.content[0].text == "Let me check."


# -- 3. /v1/responses: interleaved parallel calls ----------------------------------------------

@pytest.mark.parametrize("name", ["interleaved", "sequential"])
def test_a_call_item_is_done_only_with_its_whole_arguments(start_one_proxy: ProxyFactory,
                                                           name: str) -> None:
    with upstream(script(name), script(name)) as up:
        proxy = start_one_proxy(up)
        events = sse_events(proxy.base_url + "/responses", {
            "model": MODEL, "stream": True, "input": "read two (raw)", "tools": GPT_TOOLS})
        with gpt(proxy.base_url).responses.stream(model=MODEL, input="read two (sdk)",
                                                  tools=GPT_TOOLS) as stream:
            response = stream.get_final_response()
    done: dict[str, str] = {}  # item id -> the arguments its done events carried
    deltas: dict[str, str] = {}
    for event in events:
        kind = event["type"]
        if kind == "response.function_call_arguments.delta":
            assert event["item_id"] not in done, "a delta after the item was done"
            deltas[event["item_id"]] = deltas.get(event["item_id"], "") + event["delta"]
        elif kind == "response.function_call_arguments.done":
            done[event["item_id"]] = event["arguments"]
        elif kind == "response.output_item.done" and event["item"]["type"] == "function_call":
            assert event["item"]["arguments"] == done[event["item"]["id"]]
            assert event["item"]["status"] == "completed"
    assert sorted(done.values()) == [READ_A, READ_B]
    assert deltas == done
    assert events[-1]["type"] == "response.completed"
    assert [(o["arguments"]) for o in events[-1]["response"]["output"]
            if o["type"] == "function_call"] == [READ_A, READ_B]
    assert [(o.call_id, o.arguments) for o in response.output if o.type == "function_call"
            ] == [(("call_F" if name == "interleaved" else "call_S") + n, args)
                  for n, args in (("1", READ_A), ("2", READ_B))]


# -- 4. /v1/responses: a failure mid-stream; incomplete replies ---------------------------------

def test_an_upstream_dropped_mid_stream_fails_the_response(start_one_proxy: ProxyFactory
                                                           ) -> None:
    with upstream(script("drop")) as up:
        proxy = start_one_proxy(up)
        events = sse_events(proxy.base_url + "/responses",
                            {"model": MODEL, "stream": True, "input": "q"})
    kinds = [e["type"] for e in events]
    assert "response.output_text.delta" in kinds
    # the partial text is never said to be done, nor completed
    assert not {"response.output_text.done", "response.content_part.done",
                "response.output_item.done", "response.completed"} & set(kinds)
    assert kinds[-1] == "response.failed"
    failed = events[-1]["response"]
    assert failed["status"] == "failed"
    assert failed["error"]["code"] and "upstream" in failed["error"]["message"]
    assert [item["status"] for item in failed["output"]] == ["incomplete"]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize(("finish", "reason"), [("content_filter", "content_filter"),
                                                ("length", "max_output_tokens")])
def test_a_cut_reply_is_an_incomplete_response(start_one_proxy: ProxyFactory, stream: bool,
                                               finish: str, reason: str) -> None:
    with serve([ScriptedReply(content="Some of it", finish_reason=finish)]) as up:
        proxy = start_one_proxy(up)
        client = gpt(proxy.base_url)
        response: Any
        if stream:
            with client.responses.stream(model=MODEL, input="tell me") as events:
                response = events.get_final_response()
        else:
            response = client.responses.create(model=MODEL, input="tell me")
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == reason
    assert response.output_text == "Some of it"


# -- 5. an upstream reply that cannot be stored -------------------------------------------------

def test_an_unusable_upstream_reply_is_a_502_on_every_endpoint(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    bad = ScriptedReply(raw_body=json.dumps({"choices": [{"index": 0, "message": {
        "role": "assistant", "content": 5}, "finish_reason": "stop"}]}).encode())
    with serve([bad, bad, bad]) as up:
        proxy = start_proxy(up)
        with pytest.raises(openai.APIStatusError) as chat:
            gpt(proxy.base_url).chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "hi (chat)"}])
        with pytest.raises(anthropic.APIStatusError) as messages:
            claude(proxy.root).messages.create(
                model=MODEL, max_tokens=5, messages=[{"role": "user", "content": "hi (msg)"}])
        with pytest.raises(openai.APIStatusError) as responses:
            gpt(proxy.base_url).responses.create(model=MODEL, input="hi (responses)")
    for raised in (chat.value, responses.value):
        assert raised.status_code == 502
        assert isinstance(raised.body, dict) and raised.body["type"] == "upstream_error"
        assert "upstream sent an unusable reply" in raised.body["message"]
    assert messages.value.status_code == 502
    body = messages.value.body
    assert isinstance(body, dict) and body["type"] == "error"
    assert body["error"]["type"] == "api_error"
    assert "upstream sent an unusable reply" in body["error"]["message"]
    # nothing of the reply was stored: each session holds its user message only
    roles = [row.message["role"] for s in sqlite_store.list_sessions()
             for row in sqlite_store.get_messages(s.id)]
    assert roles == ["user"] * 3


def test_an_unusable_streamed_reply_fails_as_the_upstream_s_fault(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    with upstream(script("noid")) as up:
        proxy = start_proxy(up)
        with pytest.raises(openai.APIError, match="upstream sent an unusable reply"):
            for _ in gpt(proxy.base_url).chat.completions.create(
                    model=MODEL, stream=True, messages=[{"role": "user", "content": "hi"}]):
                pass
    roles = [row.message["role"] for s in sqlite_store.list_sessions()
             for row in sqlite_store.get_messages(s.id)]
    assert roles == ["user"]
