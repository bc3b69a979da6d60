"""``POST /v1/messages``: the official anthropic SDK against refold serve against a scripted
OpenAI-compatible upstream, over real sockets; the ledger is read back."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anthropic
import httpx
import pytest

from refold.store import Store
from refold.testing import ScriptedReply, serve

ProxyFactory = Callable[..., Any]
MODEL = "claude-scripted"


def client(root: str, key: str = "none") -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=root, api_key=key, max_retries=0, timeout=30)


def ledger(store: Store) -> list[dict[str, Any]]:
    sessions = store.list_sessions()
    assert len(sessions) == 1, [s.title for s in sessions]
    return [r.message for r in store.get_messages(sessions[0].id)]


def test_text_stream_and_continuation_store_the_history_once(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    with serve(["Paris.", "About 2.1 million people live there."]) as up:
        proxy = start_proxy(up)
        sdk = client(proxy.root)
        system = [{"type": "text", "text": "You are terse.",
                   "cache_control": {"type": "ephemeral"}}]
        history: list[dict[str, Any]] = [{"role": "user", "content": [
            {"type": "text", "text": "Capital of France?", "cache_control": {"type": "ephemeral"}}]}]
        first = sdk.messages.create(model=MODEL, max_tokens=100, system=system,  # type: ignore[arg-type]
                                    messages=history)  # type: ignore[arg-type]
        assert first.type == "message" and first.role == "assistant"
        assert [b.type for b in first.content] == ["text"]
        assert first.content[0].text == "Paris."  # type: ignore[union-attr]
        assert first.stop_reason == "end_turn"
        assert first.usage.input_tokens > 0 and first.usage.output_tokens > 0
        assert first.usage.cache_read_input_tokens == 0
        # Claude Code's way: the cache breakpoint moves to the newest message
        history = [{"role": "user", "content": [{"type": "text", "text": "Capital of France?"}]},
                   {"role": "assistant", "content": [{"type": "text", "text": "Paris."}]},
                   {"role": "user", "content": [{"type": "text", "text": "Population?",
                                                 "cache_control": {"type": "ephemeral"}}]}]
        with sdk.messages.stream(model=MODEL, max_tokens=100, system=system,  # type: ignore[arg-type]
                                 messages=history) as stream:  # type: ignore[arg-type]
            text = "".join(stream.text_stream)
            final = stream.get_final_message()
        assert text == "About 2.1 million people live there."
        assert final.content[0].text == text  # type: ignore[union-attr]
        assert final.stop_reason == "end_turn" and final.usage.output_tokens > 0

    # the upstream got the chat form: the system first, no cache_control anywhere
    sent = up.llm.requests[1]
    assert sent["messages"][0]["role"] == "system"
    assert "You are terse." in sent["messages"][0]["content"]
    assert [m["role"] for m in sent["messages"][1:]] == ["user", "assistant", "user"]
    assert "cache_control" not in json.dumps(sent)
    assert sent["stream"] is True and sent["max_tokens"] == 100
    # re-sent history with a moved cache marker is stored once
    assert [(m["role"], m["content"]) for m in ledger(sqlite_store)] == [
        ("user", "Capital of France?"), ("assistant", "Paris."), ("user", "Population?"),
        ("assistant", "About 2.1 million people live there.")]


WEATHER = {"name": "get_weather", "description": "Weather for a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                            "required": ["city"]}}
CALL = {"id": "toolu_01", "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_tool_round_trip(start_proxy: ProxyFactory, sqlite_store: Store, stream: bool) -> None:
    with serve([ScriptedReply(content=None, tool_calls=[CALL]), "It is sunny in Paris."]) as up:
        proxy = start_proxy(up)
        sdk = client(proxy.root)
        history: list[dict[str, Any]] = [{"role": "user", "content": "Weather in Paris?"}]
        kwargs: dict[str, Any] = {"model": MODEL, "max_tokens": 200, "tools": [WEATHER]}
        if stream:
            with sdk.messages.stream(messages=history, **kwargs) as events:  # type: ignore[arg-type]
                kinds = [e.type for e in events]
                first = events.get_final_message()
            assert "input_json" in kinds and kinds[-1] == "message_stop"
        else:
            first = sdk.messages.create(messages=history, **kwargs)  # type: ignore[arg-type]
        assert first.stop_reason == "tool_use"
        use = first.content[-1]
        assert use.type == "tool_use" and use.name == "get_weather"
        assert use.input == {"city": "Paris"} and use.id == "toolu_01"
        history += [{"role": "assistant", "content": [b.model_dump(exclude_none=True)
                                                      for b in first.content]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                                  "content": "sunny, 24C"}]}]
        second = sdk.messages.create(messages=history, **kwargs)  # type: ignore[arg-type]
        assert second.content[0].text == "It is sunny in Paris."  # type: ignore[union-attr]

    tools = up.llm.requests[0]["tools"]
    assert tools == [{"type": "function", "function": {
        "name": "get_weather", "parameters": WEATHER["input_schema"],
        "description": "Weather for a city"}}]
    assert up.llm.requests[1]["messages"][-1] == {"role": "tool", "tool_call_id": "toolu_01",
                                                  "content": "sunny, 24C"}
    rows = ledger(sqlite_store)
    assert [m["role"] for m in rows] == ["user", "assistant", "tool", "assistant"]
    assert rows[1]["tool_calls"][0]["function"]["name"] == "get_weather"


def test_thinking_and_images_reach_the_upstream_in_chat_form(start_proxy: ProxyFactory) -> None:
    with serve(["A red dot."]) as up:
        proxy = start_proxy(up)
        image = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                             "data": "iVBORw0KGgo="}}
        history = [{"role": "user", "content": [image, {"type": "text", "text": "What is it?"}]}]
        reply = client(proxy.root).messages.create(model=MODEL, max_tokens=50,
                                                    messages=history)  # type: ignore[arg-type]
        assert reply.content[0].text == "A red dot."  # type: ignore[union-attr]
    parts = up.llm.requests[0]["messages"][-1]["content"]
    assert parts[0] == {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}


def test_structured_output_reaches_a_chat_upstream(start_proxy: ProxyFactory) -> None:
    """Claude Code asks for its session titles as JSON (``output_config.format``, a JSON
    schema); a chat upstream got nothing of it, and answered in prose."""
    schema = {"type": "object", "properties": {"title": {"type": "string"}},
              "required": ["title"], "additionalProperties": False}
    with serve(['{"title": "Fix the login bug"}']) as up:
        proxy = start_proxy(up)
        client(proxy.root).messages.create(
            model=MODEL, max_tokens=50, messages=[{"role": "user", "content": "title?"}],
            extra_body={"output_config": {"effort": "high",
                                          "format": {"type": "json_schema", "schema": schema}}})
    sent = up.llm.requests[0]
    assert sent["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "output", "schema": schema, "strict": True}}
    assert "reasoning_effort" not in sent and "output_config" not in sent


def test_errors_come_in_anthropic_shape(start_proxy: ProxyFactory) -> None:
    rate = ScriptedReply(status=429, error={"error": {"message": "slow down",
                                                      "type": "rate_limit_error"}})
    with serve([rate, rate]) as up:
        proxy = start_proxy(up, api_keys=["sk-good"])
        sdk = client(proxy.root, "sk-good")
        with pytest.raises(anthropic.BadRequestError) as bad:
            sdk.messages.create(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                                max_tokens=None)  # type: ignore[arg-type]
        assert bad.value.body["type"] == "error"  # type: ignore[index]
        assert bad.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
        with pytest.raises(anthropic.AuthenticationError) as auth:
            client(proxy.root, "sk-bad").messages.create(
                model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "hi"}])
        assert auth.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
        with pytest.raises(anthropic.RateLimitError) as limited:
            sdk.messages.create(model=MODEL, max_tokens=10,
                                messages=[{"role": "user", "content": "hi"}])
        assert "slow down" in limited.value.body["error"]["message"]  # type: ignore[index]
        with pytest.raises(anthropic.RateLimitError), sdk.messages.stream(
                model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "hi"}]) as s:
            s.get_final_message()  # a stream that fails before it starts
        raw = httpx.post(proxy.root + "/v1/messages", content=b"{nope",
                         headers={"x-api-key": "sk-good"})
        assert raw.status_code == 400 and raw.json()["type"] == "error"


def test_a_stream_the_upstream_answers_wrongly_is_an_anthropic_error(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    garbage = ScriptedReply(raw_body=b'{"not": "a stream"}', status=200)
    with serve([garbage]) as up:
        proxy = start_proxy(up)
        with pytest.raises(anthropic.APIStatusError) as failed, client(proxy.root).messages.stream(
                model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "hi"}]) as s:
            s.get_final_message()
    assert failed.value.status_code == 502
    assert failed.value.body["error"]["type"] == "api_error"  # type: ignore[index]
    assert [m["role"] for m in ledger(sqlite_store)] == ["user"]  # no reply stored


def test_a_failure_mid_stream_becomes_an_error_event_and_no_message_stop() -> None:
    from starlette.responses import Response

    from refold.server.anthropic_wire import StreamTranslator
    from refold.server.rewrite import RewrittenStream
    from refold.server.wire import error_body, sse_error

    stream = RewrittenStream(Response(), StreamTranslator(MODEL))
    chunk = {"id": "chatcmpl-1", "choices": [
        {"index": 0, "delta": {"content": "Hal"}, "finish_reason": None}]}
    # what the pipeline sends: a chunk, then (split across writes) its sse_error
    failure = sse_error(502, error_body("upstream broke off", "upstream_error"))
    out = stream._translate(b"data: " + json.dumps(chunk).encode() + b"\n\n" + failure[:20])
    out += stream._translate(failure[20:])
    events = [e for e in out.decode().split("\n\n") if e]
    assert [e.split("\n")[0] for e in events] == [
        "event: message_start", "event: ping", "event: content_block_start",
        "event: content_block_delta", "event: error"]
    error = json.loads(events[-1].split("data: ", 1)[1])
    assert error == {"type": "error", "error": {"type": "api_error",
                                                "message": "upstream broke off"}}


def test_count_tokens(start_proxy: ProxyFactory) -> None:
    with serve([]) as up:
        proxy = start_proxy(up)
        sdk = client(proxy.root)
        short = sdk.messages.count_tokens(model=MODEL, messages=[{"role": "user", "content": "hi"}])
        long = sdk.messages.count_tokens(model=MODEL, tools=[WEATHER],  # type: ignore[list-item]
                                         messages=[{"role": "user", "content": "hi " * 200}])
    assert 0 < short.input_tokens < long.input_tokens
    assert up.llm.requests == []  # counted locally


def test_tenants_keep_their_own_sessions(start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    with serve(["for a", "for b"]) as up:
        proxy = start_proxy(up, api_keys=["sk-a", "sk-b"])
        same = [{"role": "user", "content": "Summarize my notes."}]
        for key in ("sk-a", "sk-b"):
            client(proxy.root, key).messages.create(model=MODEL, max_tokens=20,
                                                     messages=same)  # type: ignore[arg-type]
        seen = httpx.get(proxy.base_url + "/refold/sessions",
                         headers={"x-api-key": "sk-a"}).json()["data"]
    sessions = sqlite_store.list_sessions()
    assert len(sessions) == 2 and len({s.owner for s in sessions}) == 2
    assert len(seen) == 1  # key a sees only its own conversation


def test_a_long_history_is_compacted_and_the_ledger_keeps_it_all(start_proxy: ProxyFactory,
                                                                 sqlite_store: Store) -> None:
    history: list[dict[str, Any]] = []
    for n in range(30):
        history += [{"role": "user", "content": f"Question {n}: tell me about topic {n}. "
                                                + "detail " * 40},
                    {"role": "assistant", "content": f"Answer {n}: " + "because " * 40}]
    history.append({"role": "user", "content": "And finally?"})
    with serve(["Finally, this."]) as up:
        proxy = start_proxy(up, context_length=3_000)
        raw = client(proxy.root).messages.with_raw_response.create(
            model=MODEL, max_tokens=50, messages=history)  # type: ignore[arg-type]
        reply = raw.parse()
    assert reply.content[0].text == "Finally, this."  # type: ignore[union-attr]
    assert raw.headers.get("x-refold-compacted")  # the turn compacted, as chat completions do
    sent = up.llm.requests[0]["messages"]
    assert len(sent) < len(history) and sent[-1]["content"] == "And finally?"
    assert len(ledger(sqlite_store)) == len(history) + 1  # every message kept, and the reply


@pytest.mark.parametrize("as_blocks", [False, True], ids=["string", "text-block"])
def test_claude_codes_cleared_tool_results_stay_one_conversation(
        start_proxy: ProxyFactory, sqlite_store: Store, as_blocks: bool) -> None:
    """Claude Code's microcompaction re-sends old tool results as ``[Old tool result content
    cleared]`` (a string, or one text block). Each is the stored result: one session, no
    rewind, the ledger keeps what the tool said, the upstream gets what Claude Code sent."""
    cleared = "[Old tool result content cleared]"
    calls = [{"id": f"toolu_{n}", "type": "function", "function": {
        "name": "Read", "arguments": json.dumps({"file_path": f"/p/f{n}.py"})}}
        for n in range(2)]
    outputs = [f"def f{n}():\n" + "    pass\n" * 400 for n in range(2)]
    replies = [ScriptedReply(content=None, tool_calls=[calls[0]]), "Read f0.",
               ScriptedReply(content=None, tool_calls=[calls[1]]), "Read f1."]
    with serve(replies) as up:
        proxy = start_proxy(up)
        sdk = client(proxy.root)
        history: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {"model": MODEL, "max_tokens": 200}
        for n in range(2):
            history.append({"role": "user", "content": f"read f{n}.py"})
            use = sdk.messages.create(messages=history, **kwargs)  # type: ignore[arg-type]
            history += [{"role": "assistant", "content": [b.model_dump(exclude_none=True)
                                                          for b in use.content]},
                        {"role": "user", "content": [{"type": "tool_result",
                                                      "tool_use_id": f"toolu_{n}",
                                                      "content": outputs[n]}]}]
            done = sdk.messages.create(messages=history, **kwargs)  # type: ignore[arg-type]
            history.append({"role": "assistant", "content": [
                b.model_dump(exclude_none=True) for b in done.content]})
            if n == 0:  # microcompaction clears the first result before the next turn
                history[2]["content"][0]["content"] = (
                    [{"type": "text", "text": cleared}] if as_blocks else cleared)
        last = up.llm.requests[-1]["messages"]
    assert [m["content"] for m in last if m["role"] == "tool"] == [cleared, outputs[1]]
    sessions = sqlite_store.list_sessions()
    assert len(sessions) == 1, [s.title for s in sessions]
    rows = sqlite_store.get_messages(sessions[0].id, include_inactive=True)
    assert [(r.role, r.active) for r in rows] == [
        ("user", True), ("assistant", True), ("tool", True), ("assistant", True)] * 2
    assert [r.message["content"] for r in rows if r.role == "tool"] == outputs
    assert not sqlite_store.list_rewinds(sessions[0].id)


@pytest.mark.parametrize(("model", "key"), [
    ("gpt-5", "max_completion_tokens"), ("o4-mini", "max_completion_tokens"),
    ("gpt-4o", "max_tokens"), (MODEL, "max_tokens")])
def test_the_output_limit_goes_upstream_under_the_name_the_model_takes(
        start_proxy: ProxyFactory, model: str, key: str) -> None:
    """OpenAI's reasoning models refuse ``max_tokens`` (400: use max_completion_tokens): Claude
    Code through refold with a gpt-5 upstream failed on every request. Other chat servers keep
    the older name."""
    with serve(["Fine."]) as up:
        proxy = start_proxy(up)
        reply = client(proxy.root).messages.create(
            model=model, max_tokens=77, messages=[{"role": "user", "content": "hi"}])
        assert reply.content[0].text == "Fine."  # type: ignore[union-attr]
    sent = up.llm.requests[0]
    other = "max_tokens" if key == "max_completion_tokens" else "max_completion_tokens"
    assert sent[key] == 77 and other not in sent


@pytest.mark.parametrize("choice", ["auto", {"type": "tool"}, {"type": "tool", "name": ""},
                                    {"type": "sometimes"}, ["any"]])
def test_a_tool_choice_the_messages_api_refuses_is_a_400_before_anything_is_stored(
        start_proxy: ProxyFactory, sqlite_store: Store, choice: Any) -> None:
    """A string ``tool_choice`` was a 500; a ``tool`` without its name went upstream as a
    function named None; an unknown type was dropped."""
    with serve(["never"]) as up:
        proxy = start_proxy(up)
        response = httpx.post(proxy.root + "/v1/messages", json={
            "model": MODEL, "max_tokens": 20, "tool_choice": choice,
            "tools": [{"name": "read", "input_schema": {"type": "object"}}],
            "messages": [{"role": "user", "content": "read a.py"}]})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert "tool_choice" in response.json()["error"]["message"]
    assert up.llm.requests == [] and sqlite_store.list_sessions() == []


def test_a_text_block_without_its_text_is_named_where_it_is() -> None:
    from refold.errors import InvalidInput
    from refold.server.messages_api import _check_text_blocks

    ok = {"role": "user", "content": [{"type": "text", "text": "hi"}]}
    cases = [
        ({"system": [{"type": "text", "text": "s"}, {"type": "text"}], "messages": [ok]},
         "system.1.text"),
        ({"messages": [ok, {"role": "assistant", "content": [
            {"type": "text", "text": "a"}, {"type": "text", "text": 5}]}]},
         "messages.1.content.1.text"),
        ({"messages": [ok, ok, {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text"}]}]}]},
         "messages.2.content.0.content.0.text"),
    ]
    for body, where in cases:
        with pytest.raises(InvalidInput) as caught:
            _check_text_blocks(body)
        assert str(caught.value).startswith(f"{where}: a text block needs a 'text' string")
    _check_text_blocks({"system": "s", "messages": [ok, {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t", "content": "plain"}]}]})  # all well formed
