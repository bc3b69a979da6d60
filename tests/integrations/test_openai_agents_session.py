"""``RefoldSession`` under the real openai-agents ``Runner``, its model a chat-completions
client talking to a scripted server over a socket; the ledger is read back (both backends)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool
from agents.run import RunConfig
from openai import AsyncOpenAI

from refold.integrations.openai_agents import RefoldSession
from refold.runtime.engine import Engine
from refold.store import Store
from refold.testing import RunningLLM, ScriptedReply, serve

CALL = {"id": "call_w1", "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Lima"}'}}


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"foggy in {city}"


def agent_for(up: RunningLLM) -> Agent:
    client = AsyncOpenAI(base_url=up.base_url, api_key="none", max_retries=0)
    model = OpenAIChatCompletionsModel(model="scripted-model", openai_client=client)
    return Agent(name="helper", instructions="Be brief.", model=model, tools=[get_weather])


def run_all(agent: Agent, texts: list[str], session: RefoldSession) -> list[Any]:
    """The runs in one event loop (the model's client belongs to it)."""
    config = RunConfig(tracing_disabled=True)

    async def runs() -> list[Any]:
        return [await Runner.run(agent, t, session=session, run_config=config) for t in texts]

    return asyncio.run(runs())


def rows(store: Store) -> list[dict[str, Any]]:
    sessions = store.list_sessions()
    assert len(sessions) == 1
    return [r.message for r in store.get_messages(sessions[0].id)]


def test_runner_tool_round_trip_and_continuation(engine: Engine, store: Store) -> None:
    with serve([ScriptedReply(content=None, tool_calls=[CALL]), "Foggy in Lima.",
                "You asked about Lima."]) as up:
        agent = agent_for(up)
        session = RefoldSession("trip-planning", engine)
        first, second = run_all(agent, ["Weather in Lima?", "Which city did I ask about?"],
                                session)
        assert first.final_output == "Foggy in Lima."
        assert second.final_output == "You asked about Lima."
    # the second run's model call got the whole history back from refold
    sent = up.llm.requests[2]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "assistant",
                                         "user"]
    assert sent[3]["content"] == "foggy in Lima" and sent[2]["tool_calls"][0]["id"] == "call_w1"
    # each message stored once, in order
    stored = rows(store)
    assert [m["role"] for m in stored] == ["user", "assistant", "tool", "assistant", "user",
                                           "assistant"]
    assert store.list_sessions()[0].title == "trip-planning"


def test_get_items_pop_and_clear_are_reversible(engine: Engine, store: Store) -> None:
    session = RefoldSession("notes", engine)

    async def scenario() -> tuple[list[Any], Any, list[Any], list[Any]]:
        await session.add_items([{"role": "user", "content": "one"},
                                 {"type": "message", "role": "assistant", "content": [
                                     {"type": "output_text", "text": "two"}]},
                                 {"role": "user", "content": "three"}])
        before = await session.get_items()
        popped = await session.pop_item()
        after_pop = await session.get_items(limit=5)
        await session.clear_session()
        return before, popped, after_pop, await session.get_items()

    before, popped, after_pop, cleared = asyncio.run(scenario())
    assert [i.get("role") for i in before] == ["user", "assistant", "user"]
    assert popped == {"role": "user", "content": "three"}
    assert len(after_pop) == 2 and cleared == []
    sid = store.list_sessions()[0].id
    assert len(store.get_messages(sid, include_inactive=True)) == 3  # rewound, not deleted


def test_pop_item_after_a_run_pops_the_reply_then_the_question(engine: Engine,
                                                                 store: Store) -> None:
    """After ``Runner.run`` the last item is the model's reply: pop_item returns it (it used
    to raise InvalidInput, "rewind starts at a user message"), then the question before it."""
    with serve(["Foggy in Lima."]) as up:
        session = RefoldSession("undo", engine)
        (result,) = run_all(agent_for(up), ["Weather in Lima?"], session)
    assert result.final_output == "Foggy in Lima."

    async def pops() -> tuple[Any, Any, Any, list[Any]]:
        reply = await session.pop_item()
        question = await session.pop_item()
        return reply, question, await session.pop_item(), await session.get_items()

    reply, question, nothing, left = asyncio.run(pops())
    assert reply["role"] == "assistant" and "Foggy in Lima." in json.dumps(reply)
    assert question == {"role": "user", "content": "Weather in Lima?"}
    assert nothing is None and left == []
    sid = store.list_sessions()[0].id
    assert [m.message["role"] for m in store.get_messages(sid, include_inactive=True)] == [
        "user", "assistant"]  # rewound, not deleted


def test_compaction_decides_what_get_items_returns(store: Store) -> None:
    engine = Engine(store, model="gpt-4o-mini", context_length=2_000,
                    background_precompact=False)
    try:
        session = RefoldSession("long", engine)

        async def fill() -> list[Any]:
            for n in range(30):
                await session.add_items([
                    {"role": "user", "content": f"Question {n}: explain topic {n} in depth. "
                                                + "details " * 30},
                    {"role": "assistant", "content": f"Answer {n}: " + "because " * 30}])
            return await session.get_items()

        items = asyncio.run(fill())
    finally:
        engine.close()
    sid = store.list_sessions()[0].id
    assert len(store.get_messages(sid)) == 60  # the ledger keeps every message
    assert len(items) < 60  # the model view is compacted
    assert "Answer 29" in str(items[-1])  # the tail is kept verbatim
    from refold.compaction.summary import is_summary_message
    from refold.messages.responses import input_messages
    assert any(is_summary_message(m) for m in input_messages(items))  # and the rest summarized
