"""``/v1/responses``: the official openai SDK's Responses client against refold serve against a
scripted chat-completions upstream, over real sockets; refold is the state store."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

from refold.store import Store
from refold.testing import ScriptedReply, serve

ProxyFactory = Callable[..., Any]
MODEL = "scripted-model"
WEATHER = {"type": "function", "name": "get_weather", "description": "Weather for a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}
CALL = {"id": "call_7", "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}


def sdk(base_url: str, key: str = "none") -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=30)


def ledger(store: Store) -> list[dict[str, Any]]:
    sessions = store.list_sessions()
    assert len(sessions) == 1, [s.title for s in sessions]
    return [r.message for r in store.get_messages(sessions[0].id)]


def test_text_then_continuation_by_previous_response_id(start_proxy: ProxyFactory,
                                                        sqlite_store: Store) -> None:
    with serve(["Oslo.", "About 700,000."]) as up:
        proxy = start_proxy(up)
        client = sdk(proxy.base_url)
        first = client.responses.create(model=MODEL, instructions="Be terse.",
                                        input="Capital of Norway?")
        assert first.output_text == "Oslo." and first.status == "completed"
        assert first.usage is not None and first.usage.input_tokens > 0
        second = client.responses.create(model=MODEL, previous_response_id=first.id,
                                         instructions="Be terse.", input="Population?")
        assert second.output_text == "About 700,000."
        assert second.previous_response_id == first.id
        fetched = client.responses.retrieve(second.id)
        assert fetched.output_text == "About 700,000." and fetched.id == second.id
    sent = up.llm.requests[1]["messages"]
    assert [(m["role"], m["content"]) for m in sent[1:]] == [
        ("user", "Capital of Norway?"), ("assistant", "Oslo."), ("user", "Population?")]
    assert sent[0]["role"] == "system" and "Be terse." in sent[0]["content"]
    assert [(m["role"], m["content"]) for m in ledger(sqlite_store)] == [
        ("user", "Capital of Norway?"), ("assistant", "Oslo."), ("user", "Population?"),
        ("assistant", "About 700,000.")]


def test_streamed_text_with_the_sdk_stream_helper(start_proxy: ProxyFactory,
                                                  sqlite_store: Store) -> None:
    with serve(["A fjord is a long, narrow inlet."]) as up:
        proxy = start_proxy(up)
        client = sdk(proxy.base_url)
        with client.responses.stream(model=MODEL, input="What is a fjord?") as stream:
            kinds = []
            deltas = []
            for event in stream:
                kinds.append(event.type)
                if event.type == "response.output_text.delta":
                    deltas.append(event.delta)
            final = stream.get_final_response()
        assert "".join(deltas) == "A fjord is a long, narrow inlet."
        assert final.output_text == "A fjord is a long, narrow inlet."
        assert kinds[:2] == ["response.created", "response.in_progress"]
        assert kinds[-1] == "response.completed"
        assert "response.output_item.done" in kinds
        # the streamed response was stored: a continuation and GET find it
        again = client.responses.create(model=MODEL, previous_response_id=final.id,
                                        input="Thanks")
        assert client.responses.retrieve(final.id).output_text == final.output_text
        assert again.output_text == "ok"
    assert [m["role"] for m in ledger(sqlite_store)] == ["user", "assistant", "user",
                                                         "assistant"]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_tool_round_trip_sending_only_the_new_items(start_proxy: ProxyFactory,
                                                    sqlite_store: Store, stream: bool) -> None:
    with serve([ScriptedReply(content=None, tool_calls=[CALL]), "Sunny in Oslo."]) as up:
        proxy = start_proxy(up)
        client = sdk(proxy.base_url)
        if stream:
            with client.responses.stream(model=MODEL, input="Weather in Oslo?",
                                         tools=[WEATHER]) as events:  # type: ignore[list-item]
                for _ in events:
                    pass
                first = events.get_final_response()
        else:
            first = client.responses.create(model=MODEL, input="Weather in Oslo?",
                                            tools=[WEATHER])  # type: ignore[list-item]
        calls = [item for item in first.output if item.type == "function_call"]
        assert len(calls) == 1 and calls[0].name == "get_weather"
        assert calls[0].call_id == "call_7" and calls[0].arguments == '{"city": "Oslo"}'
        second = client.responses.create(
            model=MODEL, previous_response_id=first.id, tools=[WEATHER],  # type: ignore[list-item]
            input=[{"type": "function_call_output", "call_id": "call_7", "output": "sunny"}])
        assert second.output_text == "Sunny in Oslo."
    assert up.llm.requests[0]["tools"][0]["function"]["name"] == "get_weather"
    assert up.llm.requests[1]["messages"][-2]["tool_calls"][0]["id"] == "call_7"
    assert up.llm.requests[1]["messages"][-1] == {"role": "tool", "tool_call_id": "call_7",
                                                  "content": "sunny"}
    assert [m["role"] for m in ledger(sqlite_store)] == ["user", "assistant", "tool", "assistant"]


def test_full_history_as_items_is_stored_once(start_proxy: ProxyFactory,
                                              sqlite_store: Store) -> None:
    with serve(["one", "two"]) as up:
        proxy = start_proxy(up)
        client = sdk(proxy.base_url)
        client.responses.create(model=MODEL, input=[{"role": "user", "content": "Count."}],
                                store=False)
        client.responses.create(model=MODEL, input=[
            {"role": "user", "content": "Count."},
            {"type": "message", "role": "assistant",
             "content": [{"type": "output_text", "text": "one"}]},
            {"role": "user", "content": [{"type": "input_text", "text": "Again."}]}])
    assert [(m["role"], m["content"]) for m in ledger(sqlite_store)] == [
        ("user", "Count."), ("assistant", "one"), ("user", "Again."), ("assistant", "two")]


def test_errors_in_openai_shape(start_proxy: ProxyFactory) -> None:
    with serve([ScriptedReply(status=429, error={"error": {"message": "slow down",
                                                           "type": "rate_limit_error"}})]) as up:
        proxy = start_proxy(up, api_keys=["sk-a", "sk-b"])
        client = sdk(proxy.base_url, "sk-a")
        with pytest.raises(openai.RateLimitError):
            client.responses.create(model=MODEL, input="hi")
        first = client.responses.create(model=MODEL, input="hi")
        # another tenant cannot read or continue it; store=false responses are not kept
        other = sdk(proxy.base_url, "sk-b")
        with pytest.raises(openai.NotFoundError):
            other.responses.retrieve(first.id)
        with pytest.raises(openai.NotFoundError):
            other.responses.create(model=MODEL, previous_response_id=first.id, input="more")
        unkept = client.responses.create(model=MODEL, input="hi", store=False)
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(unkept.id)
        with pytest.raises(openai.BadRequestError) as bad:
            client.responses.create(model=MODEL, input=[{"type": "item_reference", "id": "x"}])
        assert "item_reference" in bad.value.message
        with pytest.raises(openai.BadRequestError) as bad:  # a tool refold cannot translate
            client.responses.create(model=MODEL, input="hi", tools=[
                {"type": "shell_of_mars", "name": "x"}])  # type: ignore[list-item]
        assert "'shell_of_mars'" in bad.value.message
        # a reasoning item whose summary is not a list: a 400 naming it (it was a 500)
        with pytest.raises(openai.BadRequestError) as bad:
            client.responses.create(model=MODEL, input=[
                {"type": "reasoning", "id": "rs_1", "summary": 1},  # type: ignore[list-item]
                {"role": "user", "content": "hi"}])
        assert "summary" in bad.value.message
        # items missing what they must hold: a 400 naming it, never a filled-in guess (a
        # result without call_id went upstream as "[no result recorded]" and was stored
        # under the call id "None"; a null text as the text "None")
        for item, says in (
                ({"type": "function_call_output", "output": "the real output"}, "call_id"),
                ({"type": "function_call_output", "call_id": 7, "output": "x"}, "call_id"),
                ({"role": "user", "content": [{"type": "input_text", "text": None}]}, "text"),
                ({"type": "function_call", "call_id": "c1", "name": "f",
                  "arguments": {"a": 1}}, "arguments")):
            with pytest.raises(openai.BadRequestError) as bad:
                client.responses.create(model=MODEL, input=[
                    {"role": "user", "content": "hi"}, item])  # type: ignore[list-item]
            assert says in bad.value.message
        raw = httpx.get(proxy.base_url + "/responses/resp_nope", headers={
            "Authorization": "Bearer sk-a"})
        assert raw.status_code == 404 and raw.json()["error"]["type"] == "not_found_error"


def test_codex_tools_a_namespace_and_a_hosted_search_go_upstream_as_functions(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    """Codex (0.171) sends its sub-agent tools grouped in a ``namespace`` tool and the hosted
    ``web_search`` with its own functions: all of it was a 400, so Codex could not work through
    refold. The namespace's functions join the others; the hosted search, which a
    chat-completions upstream cannot run, is left out."""
    tools = [WEATHER,
             {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents.",
              "tools": [{"type": "function", "name": "spawn_agent", "strict": False,
                         "parameters": {"type": "object", "properties": {}}}]},
             {"type": "web_search", "external_web_access": True}]
    call = {"id": "call_1", "type": "function",
            "function": {"name": "spawn_agent", "arguments": "{}"}}
    with serve([ScriptedReply(content=None, tool_calls=[call])]) as up:
        proxy = start_proxy(up)
        response = httpx.post(proxy.base_url + "/responses", timeout=30, json={
            "model": MODEL, "input": "start a helper", "tools": tools, "stream": False})
        assert response.status_code == 200, response.text
        sent = [t["function"]["name"] for t in up.llm.requests[0]["tools"]]
        odd = httpx.post(proxy.base_url + "/responses", timeout=30, json={
            "model": MODEL, "input": "hi", "tools": [["web_search"]]})
        assert odd.status_code == 400, odd.text  # not a 500: the tool's type is no name
    assert sent == ["get_weather", "spawn_agent"]
    # the call goes back with its namespace: Codex finds the tool by it ("unsupported call:
    # session_search" for refold's own MCP tools without it)
    assert [(i["type"], i.get("name"), i.get("namespace")) for i in response.json()["output"]
            ] == [("function_call", "spawn_agent", "multi_agent_v1")]


def test_a_streamed_call_of_a_namespaced_tool_carries_its_namespace(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    tools = [WEATHER, {"type": "namespace", "name": "mcp__refold", "description": "refold",
                       "tools": [{"type": "function", "name": "session_search",
                                  "parameters": {"type": "object", "properties": {}}}]}]
    calls = [{"id": "call_1", "type": "function",
              "function": {"name": "session_search", "arguments": '{"query": "port"}'}},
             {"id": "call_2", "type": "function",
              "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]
    with serve([ScriptedReply(content=None, tool_calls=calls)]) as up:
        proxy = start_proxy(up)
        with httpx.stream("POST", proxy.base_url + "/responses", timeout=30, json={
                "model": MODEL, "input": "find it", "tools": tools, "stream": True}) as stream:
            events = [json.loads(line[6:]) for line in stream.iter_lines()
                      if line.startswith("data: ")]
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert [(i["name"], i.get("namespace")) for i in done] == [
        ("session_search", "mcp__refold"), ("get_weather", None)]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_codex_parallel_calls_resent_in_pairs_stay_one_session(
        start_proxy: ProxyFactory, sqlite_store: Store, stream: bool) -> None:
    """OpenAI Codex records a reply of parallel calls as function_call, its output,
    function_call, its output, and re-sends them so (store: false, the whole input each turn).
    That is the stored reply with its results: one session, each message once, the upstream
    given the reply as the model wrote it. Before, every parallel turn forked a branch holding a
    copy of the conversation (with X-Refold-Session: rewound the model's reply)."""
    calls = [{"id": f"call_{n}", "type": "function",
              "function": {"name": "get_weather", "arguments": f'{{"city": "{city}"}}'}}
             for n, city in ((1, "Oslo"), (2, "Rome"))]
    with serve([ScriptedReply(content=None, tool_calls=calls), "Sunny and warm.",
                "You are welcome."]) as up:
        client = sdk(start_proxy(up).base_url)
        ask: list[Any] = [{"type": "message", "role": "user",
                           "content": [{"type": "input_text", "text": "Weather in Oslo and Rome?"}]}]

        def turn(items: list[Any]) -> Any:
            if not stream:
                return client.responses.create(model=MODEL, input=items, tools=[WEATHER],
                                               store=False, parallel_tool_calls=True)
            with client.responses.stream(model=MODEL, input=items, tools=[WEATHER],
                                         store=False, parallel_tool_calls=True) as events:
                for _ in events:
                    pass
                return events.get_final_response()

        first = turn(ask)
        pairs: list[Any] = []
        for item in first.output:
            pairs += [{"type": "function_call", "call_id": item.call_id, "name": item.name,
                       "arguments": item.arguments},
                      {"type": "function_call_output", "call_id": item.call_id,
                       "output": f"sunny in {json.loads(item.arguments)['city']}"}]
        second = turn(ask + pairs)
        assert second.output_text == "Sunny and warm."
        third = turn([*ask, *pairs, {"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": "Sunny and warm."}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text",
                                                             "text": "Thanks!"}]}])
        assert third.output_text == "You are welcome."
    assert [m["role"] for m in ledger(sqlite_store)] == [
        "user", "assistant", "tool", "tool", "assistant", "user", "assistant"]
    sent = up.llm.requests[1]["messages"]
    assert [m["role"] for m in sent if m["role"] != "system"] == [
        "user", "assistant", "tool", "tool"]
    assert [c["id"] for c in sent[-3]["tool_calls"]] == ["call_1", "call_2"]


def test_prompt_cache_key_and_the_other_shared_fields_reach_a_chat_upstream(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    """Codex sends its conversation id as ``prompt_cache_key`` (the upstream routes the turns to
    one prompt cache); chat completions takes it, ``safety_identifier`` and ``service_tier``
    alike. They were left out; ``store`` and ``metadata`` (refold keeps the response) are."""
    with serve(["Oslo."]) as up:
        proxy = start_proxy(up)
        client = sdk(proxy.base_url)
        client.responses.create(model=MODEL, input="Capital of Norway?",
                                prompt_cache_key="019a-codex-conversation",
                                safety_identifier="user-42", service_tier="flex",
                                store=True, metadata={"task": "t1"})
    sent = up.llm.requests[0]
    assert sent["prompt_cache_key"] == "019a-codex-conversation"
    assert sent["safety_identifier"] == "user-42" and sent["service_tier"] == "flex"
    assert "store" not in sent and "metadata" not in sent
