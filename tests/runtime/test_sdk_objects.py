"""The library takes the client SDKs' own objects where it takes messages.

An agent written with the ``openai`` SDK holds ``response.choices[0].message`` (a pydantic
``ChatCompletionMessage``), its ``tool_calls`` and ``response.usage``; the usual loop appends
the message object itself to its history. ``record``, ``tools.dispatch``, ``prepare``,
``prepare_history`` and the store's ``sync_messages`` take them as the dicts they were parsed
from (they raised "must be a dict", or an ``AttributeError`` traceback, before). Driven here by
the real SDK against a scripted upstream on a local socket.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from refold.errors import InvalidInput
from refold.runtime import Engine
from refold.store import Store
from refold.testing import ScriptedReply, serve
from refold.tools import agent_tools

GOAL_CALL = {"id": "call_goal", "type": "function", "function": {
    "name": "todo", "arguments": json.dumps({"action": "set_goal", "goal": "fix the tests"})}}


@pytest.fixture
def client_and_upstream() -> Iterator[tuple[openai.OpenAI, Any]]:
    replies = [ScriptedReply(content="", tool_calls=[GOAL_CALL]),
               ScriptedReply(content="The goal is set.")]
    with serve(replies) as upstream:
        yield openai.OpenAI(base_url=upstream.base_url, api_key="test", max_retries=0), upstream


def _rows(store: Store, session_id: str) -> list[dict[str, Any]]:
    return [m.message for m in store.get_messages(session_id)]


def test_an_openai_sdk_agent_loop_records_the_sdks_objects(
        engine: Engine, store: Store,
        client_and_upstream: tuple[openai.OpenAI, Any]) -> None:
    client, upstream = client_and_upstream
    rt = engine.open_session(new=True, title="sdk objects")
    tools = agent_tools(store, session_id=rt.session_id, memory=engine.memory)
    prepared = rt.prepare([{"role": "user", "content": "Run the tests"}],
                          system_prompt="You are a coding agent.", tools=tools.schemas())
    usages = []
    for _ in range(3):
        response = client.chat.completions.create(model="m", messages=prepared.messages,
                                                  tools=tools.schemas())
        message = response.choices[0].message
        usages.append(response.usage)
        rt.record(message, usage=response.usage)  # the SDK's objects, as they come
        if not message.tool_calls:
            break
        results = [tools.dispatch(call) for call in message.tool_calls]
        prepared = rt.prepare(results, tools=tools.schemas())

    rows = _rows(store, rt.session_id)
    assert [r["role"] for r in rows] == ["user", "assistant", "tool", "assistant"]
    assert rows[1]["tool_calls"] == [GOAL_CALL]
    assert rows[2]["tool_call_id"] == "call_goal"
    assert json.loads(rows[2]["content"])["goal"] == "fix the tests"  # the tool really ran
    assert rows[3]["content"] == "The goal is set."
    # nulls the SDK holds (refusal, audio, function_call) are not stored as keys
    assert all(key == "content" for r in rows for key, value in r.items() if value is None)
    # the usage objects were counted: the session's totals are the replies' own
    session = store.get_session(rt.session_id)
    assert (session.input_tokens, session.output_tokens) == (
        sum(u.prompt_tokens for u in usages), sum(u.completion_tokens for u in usages))
    assert session.input_tokens > 0
    # the second request the upstream saw carried the reply as the SDK parsed it, then the
    # tool result: nothing invented, nothing lost
    second = upstream.llm.requests[1]["messages"]
    assert [m["role"] for m in second[-3:]] == ["user", "assistant", "tool"]
    assert second[-2]["tool_calls"][0]["id"] == "call_goal"


def test_a_history_of_sdk_message_objects_is_synced_once(
        engine: Engine, store: Store,
        client_and_upstream: tuple[openai.OpenAI, Any]) -> None:
    client, _ = client_and_upstream
    history: list[Any] = [{"role": "user", "content": "Run the tests"}]
    rt = engine.open_session(new=True, title="sdk history")
    prepared = rt.prepare_history(list(history))
    response = client.chat.completions.create(model="m", messages=prepared.messages)
    history.append(response.choices[0].message)  # the openai docs' loop
    history.append({"role": "tool", "tool_call_id": "call_goal", "content": "set"})
    rt.prepare_history(list(history))
    rt.prepare_history(list(history))  # re-sent as is: nothing stored twice
    rows = _rows(store, rt.session_id)
    assert [r["role"] for r in rows] == ["user", "assistant", "tool"]
    assert rows[1]["tool_calls"] == [GOAL_CALL]

    other = store.create_session(title="store sync")
    store.sync_messages(other.id, history)
    store.sync_messages(other.id, history)
    assert [m.message for m in store.get_messages(other.id)] == rows


def test_what_is_not_a_message_still_gets_a_clear_error(engine: Engine, store: Store) -> None:
    rt = engine.open_session(new=True, title="bad input")
    tools = agent_tools(store, session_id=rt.session_id, memory=engine.memory)
    rt.prepare([{"role": "user", "content": "hi"}])
    with pytest.raises(InvalidInput, match="assistant message"):
        rt.record("just a string")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="usage"):
        rt.record({"role": "assistant", "content": "hi"}, usage=42)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="tool call"):
        tools.dispatch("todo")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="a message must be a JSON object"):
        rt.prepare([object()])
    assert [m.message["role"] for m in store.get_messages(rt.session_id)] == ["user"]


def test_anthropic_sdk_content_blocks_convert_as_their_docs_loop_holds_them() -> None:
    import anthropic

    from refold.messages import from_anthropic, to_anthropic
    from refold.testing.anthropic_server import AnthropicReply, serve_anthropic

    blocks = [{"type": "text", "text": "Listing it."},
              {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {"path": "."}}]
    with serve_anthropic([AnthropicReply(content=blocks, stop_reason="tool_use")]) as upstream:
        client = anthropic.Anthropic(base_url=upstream.base_url, api_key="test", max_retries=0)
        history: list[Any] = [{"role": "user", "content": "What is here?"}]
        response = client.messages.create(model="m", max_tokens=100, messages=history)
    history.append({"role": "assistant", "content": response.content})  # SDK block objects
    history.append({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "README.md"}]})
    converted = from_anthropic(history)
    assert converted == [
        {"role": "user", "content": "What is here?"},
        {"role": "assistant", "content": "Listing it.", "tool_calls": [{
            "id": "toolu_1", "type": "function",
            "function": {"name": "ls", "arguments": '{"path": "."}'}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "README.md"}]
    assert from_anthropic([history[0], response]) == converted[:2]  # the Message object too
    assert to_anthropic(converted)["messages"][1]["content"] == blocks
