"""The proxy end to end: the OpenAI SDK against refold serve against a scripted upstream.

Real sockets all the way: openai → uvicorn (refold's app) → httpx → the scripted server; the
ledger is a real SQLite store whose rows the tests read back.
"""

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

SYSTEM = {"role": "system", "content": "You are terse."}


def sdk(base_url: str, key: str = "none") -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=30)


def roles_and_text(store: Store, session_id: str) -> list[tuple[str, str]]:
    return [(r.role, str(r.message.get("content") or "")) for r in store.get_messages(session_id)]


def only_session(store: Store) -> str:
    sessions = store.list_sessions()
    assert len(sessions) == 1, [s.title for s in sessions]
    return sessions[0].id


def test_sdk_works_unchanged_json_and_stream_and_history_is_stored_once(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    with serve(["Paris.", "About 2.1 million.", "Yes, the Seine."]) as up:
        proxy = start_proxy(up)
        client = sdk(proxy.base_url)
        history: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "Capital of France?"}]
        first = client.chat.completions.create(model="scripted-model", messages=history)
        assert first.choices[0].message.content == "Paris."
        history += [{"role": "assistant", "content": "Paris."},
                    {"role": "user", "content": "Population?"}]
        stream = client.chat.completions.create(model="scripted-model", messages=history,
                                                stream=True)
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        assert text == "About 2.1 million."
        history += [{"role": "assistant", "content": text},
                    {"role": "user", "content": "On a river?"}]
        third = client.chat.completions.create(model="scripted-model", messages=history)
        assert third.choices[0].message.content == "Yes, the Seine."

    session_id = only_session(sqlite_store)
    assert roles_and_text(sqlite_store, session_id) == [
        ("user", "Capital of France?"), ("assistant", "Paris."),
        ("user", "Population?"), ("assistant", "About 2.1 million."),
        ("user", "On a river?"), ("assistant", "Yes, the Seine.")]
    session = sqlite_store.get_session(session_id)
    assert session.source == "serve"
    assert session.input_tokens > 0 and session.output_tokens > 0  # usage recorded (stream too)
    # the upstream got the client's system prompt first, and the stream asked for usage
    assert up.llm.requests[0]["messages"][0]["role"] == "system"
    assert "You are terse." in up.llm.requests[0]["messages"][0]["content"]
    assert up.llm.requests[1]["stream_options"] == {"include_usage": True}
    # which way the runtime ran: the first turn always in a worker thread (no known history
    # yet); later ones on the event loop with serve's NORMAL ledger, in threads with FULL
    pipeline = proxy.app.state.proxy_app.proxy
    light = sqlite_store.commits_are_quick  # type: ignore[attr-defined]
    assert (pipeline.light_prepares, pipeline.worker_prepares) == ((2, 1) if light else (0, 3))


def test_stream_hides_the_usage_chunk_unless_asked_and_keeps_it_when_asked(
        start_proxy: ProxyFactory) -> None:
    with serve(["one", "two"]) as up:
        proxy = start_proxy(up)
        client = sdk(proxy.base_url)
        plain = list(client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "a"}], stream=True))
        assert all(c.usage is None for c in plain)
        asked = list(client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "b"}], stream=True,
            stream_options={"include_usage": True}))
        assert asked[-1].usage is not None and asked[-1].usage.total_tokens > 0


def test_tool_calls_stream_through_and_are_recorded_whole(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    call = {"id": "call_1", "type": "function",
            "function": {"name": "read_file", "arguments": json.dumps({"path": "/etc/hosts"})}}
    with serve([ScriptedReply(content=None, tool_calls=[call])]) as up:
        proxy = start_proxy(up)
        stream = sdk(proxy.base_url).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "show hosts"}], stream=True)
        chunks = list(stream)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    rows = sqlite_store.get_messages(only_session(sqlite_store))
    assert rows[-1].message["tool_calls"] == [call]


def test_header_names_the_session_and_response_tells_the_id(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    with serve(["a", "b"]) as up:
        proxy = start_proxy(up)
        body = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}
        r1 = httpx.post(proxy.base_url + "/chat/completions", json=body,
                        headers={"X-Refold-Session": "ticket-42"})
        r2 = httpx.post(proxy.base_url + "/chat/completions", json=body)
    assert r1.status_code == r2.status_code == 200
    named = sqlite_store.resolve_session("ticket-42")
    assert r1.headers["x-refold-session"] == named.id
    assert r2.headers["x-refold-session"] != named.id  # no header: the derived session
    assert [r.role for r in sqlite_store.get_messages(named.id)] == ["user", "assistant"]


def test_overflow_compacts_and_retries(start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    filler = "The build log said: step {} compiled module alpha beta gamma delta. " * 12
    history: list[dict[str, Any]] = [SYSTEM]
    for i in range(30):
        history += [{"role": "user", "content": f"turn {i}: " + filler.replace("{}", str(i))},
                    {"role": "assistant", "content": f"noted {i}"}]
    history.append({"role": "user", "content": "Summarize where we are."})
    size = len(json.dumps(history)) // 4
    limit = size * 45 // 100  # the upstream's real window is smaller than refold was told
    with serve(["Here is where we are."], max_context_tokens=limit) as up:
        proxy = start_proxy(up, context_length=12_000)  # no preflight compaction at this size
        reply = sdk(proxy.base_url).chat.completions.create(model="m", messages=history)
        sent = [len(json.dumps(r["messages"])) // 4 for r in up.llm.requests]
    assert reply.choices[0].message.content == "Here is where we are."
    assert len(sent) >= 2 and sent[0] > limit >= sent[-1]  # rejected, compacted, then fit
    session_id = only_session(sqlite_store)
    assert sqlite_store.list_checkpoints(session_id)  # compaction appended a checkpoint
    assert len(sqlite_store.get_messages(session_id)) == len(history) - 1 + 1  # nothing lost


def test_overflow_that_cannot_be_fixed_is_a_400_context_length_exceeded(
        start_proxy: ProxyFactory) -> None:
    with serve([], max_context_tokens=1) as up:
        proxy = start_proxy(up)
        with pytest.raises(openai.BadRequestError) as info:
            sdk(proxy.base_url).chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}])
    assert info.value.code == "context_length_exceeded"


def test_upstream_down_is_an_openai_shaped_502(start_proxy: ProxyFactory) -> None:
    proxy = start_proxy("http://127.0.0.1:9/v1")  # nothing listens on the discard port
    for stream in (False, True):
        response = httpx.post(proxy.base_url + "/chat/completions", json={
            "model": "m", "stream": stream, "messages": [{"role": "user", "content": "hi"}]})
        assert response.status_code == 502
        error = response.json()["error"]
        assert error["type"] == "upstream_error" and error["code"] == "upstream_network"
        assert "cannot reach upstream" in error["message"]
    with pytest.raises(openai.APIStatusError) as info:
        sdk(proxy.base_url).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}])
    assert info.value.status_code == 502


@pytest.mark.parametrize(("status", "expected", "code"), [
    (401, 502, "upstream_auth"), (429, 429, "upstream_rate_limit"),
    (500, 502, "upstream_server"), (400, 400, "upstream_bad_request"),
    (529, 503, "upstream_overloaded")])
def test_upstream_errors_map_to_sensible_statuses(start_proxy: ProxyFactory, status: int,
                                                  expected: int, code: str) -> None:
    reply = ScriptedReply(status=status, error={"error": {"message": f"scripted {status}",
                                                          "type": "x"}})
    with serve([reply]) as up:
        proxy = start_proxy(up)
        response = httpx.post(proxy.base_url + "/chat/completions", json={
            "model": "m", "messages": [{"role": "user", "content": "hi"}]})
    assert response.status_code == expected
    error = response.json()["error"]
    assert error["code"] == code and f"scripted {status}" in error["message"]


@pytest.mark.parametrize("stream", [False, True])
def test_upstream_garbage_or_dropped_connection_is_a_502(start_proxy: ProxyFactory,
                                                         sqlite_store: Store,
                                                         stream: bool) -> None:
    replies = [ScriptedReply(raw_body=b"<html>oops</html>"), ScriptedReply(drop_connection=True)]
    with serve(replies) as up:
        proxy = start_proxy(up)
        for _ in replies:
            response = httpx.post(proxy.base_url + "/chat/completions", json={
                "model": "m", "stream": stream,
                "messages": [{"role": "user", "content": "hi"}]})
            assert response.status_code == 502
            assert response.json()["error"]["type"] == "upstream_error"
    # the question is kept (it was acknowledged by the store); no assistant row was invented
    assert [r.role for r in sqlite_store.get_messages(only_session(sqlite_store))] == ["user"]


def test_garbage_and_bad_bodies_are_openai_shaped_400s(start_proxy: ProxyFactory) -> None:
    with serve([]) as up:
        proxy = start_proxy(up)
        url = proxy.base_url + "/chat/completions"
        hi = b'"messages": [{"role": "user", "content": "hi"}]'
        for body in (b"{not json", b"[]", b'{"messages": []}', b'{"messages": [{"content": 1}]}',
                     # these were 500s (a TypeError deep in the turn), found by fuzzing
                     b'{"model": "m", "tools": 5, ' + hi + b"}",
                     b'{"model": "m", "tools": [5], ' + hi + b"}",
                     b'{"model": {"name": "m"}, ' + hi + b"}"):
            response = httpx.post(url, content=body)
            assert response.status_code == 400, body
            assert response.json()["error"]["type"] == "invalid_request_error"
        for body in (b'{"model": "m", "input": 5}', b'{"model": "m", "input": null}',
                     b'{"model": 5, "input": "hi"}'):
            response = httpx.post(proxy.base_url + "/responses", content=body)
            assert response.status_code == 400, body
            assert response.json()["error"]["type"] == "invalid_request_error"
        missing = httpx.get(proxy.root + "/v1/nothing-here")
        assert missing.status_code == 404 and "error" in missing.json()
        assert up.llm.requests == []


def test_body_limit_is_a_413(start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    with serve([]) as up:
        proxy = start_proxy(up, max_body_bytes=4096)
        big = {"model": "m", "messages": [{"role": "user", "content": "x" * 10_000}]}
        declared = httpx.post(proxy.base_url + "/chat/completions", json=big)

        def chunks() -> Any:  # no Content-Length: the limit holds while reading
            data = json.dumps(big).encode()
            for i in range(0, len(data), 1000):
                yield data[i:i + 1000]

        streamed = httpx.post(proxy.base_url + "/chat/completions", content=chunks())
    for response in (declared, streamed):
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "request_too_large"
    assert up.llm.requests == [] and sqlite_store.list_sessions() == []


def test_models_are_proxied_with_the_configured_model(start_proxy: ProxyFactory) -> None:
    with serve([]) as up:
        proxy = start_proxy(up, model="my-default")
        ids = [m.id for m in sdk(proxy.base_url).models.list()]
    assert ids == ["scripted-model", "my-default"]


def test_lru_keeps_few_runtimes_and_evicted_sessions_resume(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    with serve(default=lambda body: "ok") as up:
        proxy = start_proxy(up, capacity=2)
        client = sdk(proxy.base_url)
        histories = {n: [{"role": "user", "content": f"conversation {n}"}] for n in range(4)}
        for _ in range(2):
            for history in histories.values():
                client.chat.completions.create(model="m", messages=history)
                history += [{"role": "assistant", "content": "ok"},
                            {"role": "user", "content": "more"}]
        pool = proxy.app.state.proxy_app.proxy.pool
        assert pool.cached() <= 2
    sessions = sqlite_store.list_sessions()
    assert len(sessions) == 4
    for session in sessions:
        assert [r.role for r in sqlite_store.get_messages(session.id)] == \
            ["user", "assistant", "user", "assistant"]


def test_client_gone_mid_stream_records_nothing_partial_and_frees_the_session(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    slow = ScriptedReply(content="A long answer that streams slowly. " * 10, chunk_delay=0.05)
    history = [{"role": "user", "content": "tell me slowly"}]
    with serve([slow, "The retried answer."]) as up:
        proxy = start_proxy(up)
        with httpx.stream("POST", proxy.base_url + "/chat/completions", json={
                "model": "m", "messages": history, "stream": True}) as response:
            for line in response.iter_lines():
                if "A long answer" in line:
                    break  # leave: the client hangs up mid-stream
        again = httpx.post(proxy.base_url + "/chat/completions", timeout=30,
                           json={"model": "m", "messages": history})
    assert again.status_code == 200
    assert roles_and_text(sqlite_store, only_session(sqlite_store)) == [
        ("user", "tell me slowly"), ("assistant", "The retried answer.")]


@pytest.mark.postgres
def test_sdk_turns_on_postgres_store_history_once(start_pg_proxy: ProxyFactory,
                                                  postgres_store: Store) -> None:
    with serve(["First.", "Second."]) as up:
        proxy = start_pg_proxy(up)
        client = sdk(proxy.base_url)
        history: list[dict[str, Any]] = [{"role": "user", "content": "one"}]
        client.chat.completions.create(model="m", messages=history)
        history += [{"role": "assistant", "content": "First."},
                    {"role": "user", "content": "two"}]
        text = "".join(c.choices[0].delta.content or "" for c in
                       client.chat.completions.create(model="m", messages=history, stream=True)
                       if c.choices)
    assert text == "Second."
    assert roles_and_text(postgres_store, only_session(postgres_store)) == [
        ("user", "one"), ("assistant", "First."), ("user", "two"), ("assistant", "Second.")]


def test_agent_loop_resending_sdk_messages_with_tool_calls_stores_each_once(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    call = {"id": "call_9", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    tools = [{"type": "function", "function": {
        "name": "get_weather", "parameters": {"type": "object",
                                              "properties": {"city": {"type": "string"}}}}}]
    with serve([ScriptedReply(content=None, tool_calls=[call]), "It is sunny.", "Bye."]) as up:
        proxy = start_proxy(up)
        client = sdk(proxy.base_url)
        messages: list[Any] = [{"role": "user", "content": "weather in Paris?"}]
        first = client.chat.completions.create(model="m", messages=messages, tools=tools)
        messages.append(first.choices[0].message)  # the SDK object, as agent loops do
        messages.append({"role": "tool", "tool_call_id": "call_9", "content": "sunny"})
        second = client.chat.completions.create(model="m", messages=messages, tools=tools)
        messages += [second.choices[0].message, {"role": "user", "content": "thanks"}]
        client.chat.completions.create(model="m", messages=messages, tools=tools)
    rows = sqlite_store.get_messages(only_session(sqlite_store), include_inactive=True)
    assert [(r.role, r.active) for r in rows] == [
        ("user", True), ("assistant", True), ("tool", True), ("assistant", True),
        ("user", True), ("assistant", True)]
    assert rows[1].message["tool_calls"] == [call]


def test_a_long_history_is_compacted_before_it_goes_upstream(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    filler = "The build log said: step N compiled module alpha beta gamma delta. " * 12
    history: list[dict[str, Any]] = [SYSTEM]
    for i in range(30):
        history += [{"role": "user", "content": f"turn {i}: " + filler.replace("N", str(i))},
                    {"role": "assistant", "content": f"noted {i}"}]
    history.append({"role": "user", "content": "And now?"})
    with serve(["Now we ship."]) as up:
        proxy = start_proxy(up, context_length=8_000)  # the history is over the threshold
        reply = sdk(proxy.base_url).chat.completions.create(model="m", messages=history)
        sent = up.llm.requests[0]["messages"]
    assert reply.choices[0].message.content == "Now we ship."
    assert len(up.llm.requests) == 1  # compacted before sending: no overflow round-trip
    assert len(sent) < len(history) // 2
    assert sent[0]["role"] == "system" and sent[-1]["content"] == "And now?"
    session_id = only_session(sqlite_store)
    assert sqlite_store.list_checkpoints(session_id)
    assert len(sqlite_store.get_messages(session_id)) == len(history)  # 61 stored + the reply


def test_wrong_method_is_an_openai_shaped_405(start_proxy: ProxyFactory) -> None:
    with serve([]) as up:
        proxy = start_proxy(up)
        response = httpx.get(proxy.base_url + "/chat/completions")
    assert response.status_code == 405
    assert response.json()["error"]["type"] == "invalid_request_error"


def test_big_and_odd_bodies_pass_through_intact(start_proxy: ProxyFactory,
                                                sqlite_store: Store) -> None:
    big = "长文本 with a lone surrogate \ud800 and more. " * 4000  # > 64 KiB: parsed off-loop
    with serve(["got it"]) as up:
        proxy = start_proxy(up)
        response = httpx.post(proxy.base_url + "/chat/completions", content=json.dumps(
            {"model": "m", "messages": [{"role": "user", "content": big}]}).encode(),
            headers={"Content-Type": "application/json"})
        sent = up.llm.requests[0]["messages"][-1]["content"]
    repaired = big.replace("\ud800", "\ufffd")  # refold.messages' documented repair
    assert response.status_code == 200
    assert sent == repaired
    stored = sqlite_store.get_messages(only_session(sqlite_store))[0].message["content"]
    assert stored == repaired


def test_a_name_that_is_a_prefix_of_another_sessions_id_gets_its_own_session(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    # found by the property test: `X-Refold-Session: c3` resolved, by id prefix, to another
    # conversation whose id began with "c3", and rewound that conversation's tail
    with serve(["4", "Done.", "Four."]) as up:
        proxy = start_proxy(up)
        client = sdk(proxy.base_url)
        first = [{"role": "user", "content": "What is 2+2?"}]
        r1 = client.chat.completions.with_raw_response.create(
            model="m", messages=first, extra_headers={"X-Refold-Session": "first"})
        original = r1.headers["x-refold-session"]
        client.chat.completions.create(
            model="m", messages=[*first, {"role": "assistant", "content": "4"},
                                 {"role": "user", "content": "Now tidy up."}],
            extra_headers={"X-Refold-Session": "first"})
        name = original[:4]  # a new conversation named like the start of that id
        r3 = client.chat.completions.with_raw_response.create(
            model="m", messages=first, extra_headers={"X-Refold-Session": name})
        assert up.llm.requests[-1]["messages"] == first  # what this client sent, nothing else
    assert r3.headers["x-refold-session"] != original
    assert sqlite_store.resolve_session(name, prefix=False).id == r3.headers["x-refold-session"]
    assert [t for _, t in roles_and_text(sqlite_store, original)] == [
        "What is 2+2?", "4", "Now tidy up.", "Done."]  # untouched
    assert not [r for r in sqlite_store.list_rewinds(original) if r.seqs]


@pytest.mark.parametrize("messages", [
    [{"role": "system", "content": ""}],
    [{"role": "system", "content": ""}, {"role": "system", "content": ""}],
])
def test_a_request_of_only_empty_system_messages_goes_upstream_as_sent(
        start_proxy: Any, messages: list[dict[str, Any]]) -> None:
    """refold leaves an empty system prompt out; a request holding nothing else went upstream
    as ``messages: []``, which providers refuse — a different request from the client's. What
    was sent goes on as sent (the upstream answers it, or refuses it, as it would have)."""
    with serve(default=lambda body: ScriptedReply(content="ok")) as up:
        proxy = start_proxy(up, memory_enabled=False)
        client = openai.OpenAI(base_url=proxy.base_url, api_key="none", max_retries=0)
        reply = client.chat.completions.create(model="m", messages=messages)  # type: ignore[arg-type]
        assert reply.choices[0].message.content == "ok"
        assert up.llm.requests[-1]["messages"] == messages


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_client_that_reserializes_the_reply_it_got_continues_the_same_session(
        start_proxy: ProxyFactory, sqlite_store: Store, stream: bool) -> None:
    """Clients on the Vercel AI SDK (OpenCode among them) re-send a tool-calling reply with
    ``content: ""`` and its arguments re-serialized (``{"a":1}`` for the model's ``{"a": 1}``),
    without the keys they do not know. Before, each such turn diverged from the stored reply:
    every tool turn forked a branch session holding a copy of the whole conversation."""
    call = {"id": "call_1", "type": "function",
            "function": {"name": "bash", "arguments": '{"command": "ls -la", "timeout": 5}'}}
    as_resent = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "bash", "arguments": '{"timeout":5,"command":"ls -la"}'}}]}
    with serve([ScriptedReply(content=None, tool_calls=[call]), "Two files.",
                ScriptedReply(content=None, tool_calls=[call]), "Still two."]) as up:
        proxy = start_proxy(up)
        history: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "list the files"}]
        for turn in range(4):
            body = {"model": "m", "messages": history, "stream": stream}
            response = httpx.post(proxy.base_url + "/chat/completions", json=body, timeout=30)
            assert response.status_code == 200, response.text
            if turn in (0, 2):
                history += [as_resent, {"role": "tool", "tool_call_id": "call_1",
                                        "content": "a.txt b.txt"}]
            elif turn == 1:
                history += [{"role": "assistant", "content": "Two files."},
                            {"role": "user", "content": "and now?"}]
        # the upstream got the whole conversation each time, the call's arguments the same
        sent = up.llm.requests[-1]["messages"]
        assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "assistant",
                                            "user", "assistant", "tool"]
        assert json.loads(sent[2]["tool_calls"][0]["function"]["arguments"]) == {
            "command": "ls -la", "timeout": 5}
    rows = sqlite_store.get_messages(only_session(sqlite_store), include_inactive=True)
    assert [(r.role, r.active) for r in rows] == [
        ("user", True), ("assistant", True), ("tool", True), ("assistant", True),
        ("user", True), ("assistant", True), ("tool", True), ("assistant", True)]


def test_a_system_prompt_that_changes_every_turn_stays_one_session(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    """Agents put the time or the working tree's state in their system prompt. The derived
    session hashed it, so each turn with a new prompt started a new root session and stored the
    whole history again (3 turns: 3 sessions, the first question stored 3 times). The prompt
    sent upstream is still each request's own; the session records the change."""
    with serve(["one", "two", "three"]) as up:
        client = sdk(start_proxy(up).base_url)
        history: list[dict[str, Any]] = [{"role": "user", "content": "what time is it?"}]
        for turn, reply in enumerate(["one", "two", "three"]):
            system = {"role": "system", "content": f"You are terse. Time: 10:0{turn}"}
            out = client.chat.completions.create(model="m", messages=[system, *history])
            assert out.choices[0].message.content == reply
            history += [{"role": "assistant", "content": reply},
                        {"role": "user", "content": f"and now {turn}?"}]
        assert [r["messages"][0]["content"] for r in up.llm.requests] == [
            f"You are terse. Time: 10:0{turn}" for turn in range(3)]
    session_id = only_session(sqlite_store)
    texts = [text for _, text in roles_and_text(sqlite_store, session_id)]
    assert texts == ["what time is it?", "one", "and now 0?", "two", "and now 1?", "three"]


def test_two_agents_opening_with_the_same_question_keep_their_own_histories(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    """Without the header, two conversations that open with the same user message share a
    derived family; each continues in its own branch, neither rewinds the other."""
    with serve(default=lambda body: ScriptedReply(
            content="A" if "agent A" in body["messages"][0]["content"] else "B")) as up:
        client = sdk(start_proxy(up).base_url)
        chats = {name: [{"role": "system", "content": f"You are agent {name}."},
                        {"role": "user", "content": "hi"}] for name in "AB"}
        for turn in range(2):
            for name, history in chats.items():
                out = client.chat.completions.create(model="m", messages=history)
                history += [{"role": "assistant", "content": out.choices[0].message.content},
                            {"role": "user", "content": f"{name} turn {turn}"}]
    by_history = sorted(tuple(text for _, text in roles_and_text(sqlite_store, s.id))
                        for s in sqlite_store.list_sessions())
    assert by_history == [("hi", "A", "A turn 0", "A"), ("hi", "B", "B turn 0", "B")]
    assert not any(sqlite_store.list_rewinds(s.id) for s in sqlite_store.list_sessions())


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_two_interleaved_conversations_that_reserialize_calls_keep_one_session_each(
        start_proxy: ProxyFactory, sqlite_store: Store, stream: bool) -> None:
    """Two pydantic-ai agents (or two users of one app) open with the same system prompt and
    question, and their turns interleave. pydantic-ai re-sends the model's call with its
    arguments re-serialized (``{"city":"paris"}`` for ``{"city": "paris"}``). The re-spelled
    call was matched only against the session that served the last turn — the other
    conversation's branch — so each tool turn diverged and forked a new branch holding a copy
    of its own conversation (two conversations: four sessions, then more each turn)."""
    def reply(body: dict[str, Any]) -> ScriptedReply:
        last = body["messages"][-1]
        if last["role"] == "tool":
            return ScriptedReply(content="done: " + last["content"])
        if "weather" in last["content"]:
            name = last["content"][-1]
            return ScriptedReply(content=None, tool_calls=[{
                "id": f"call_{name}", "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "paris"}'}}])
        return ScriptedReply(content="hello")

    with serve(default=reply) as up:
        proxy = start_proxy(up)
        chats = {name: [{"role": "system", "content": "You are a helpful agent."},
                        {"role": "user", "content": "hi"}] for name in "AB"}

        def send(history: list[dict[str, Any]]) -> dict[str, Any]:
            body = {"model": "m", "messages": history, "stream": stream, "tool_choice": "auto"}
            response = httpx.post(proxy.base_url + "/chat/completions", json=body, timeout=30)
            assert response.status_code == 200, response.text
            return response.json() if not stream else {}

        for name, history in chats.items():
            send(history)
            history += [{"role": "assistant", "content": "hello"},
                        {"role": "user", "content": f"weather {name}"}]
        for name, history in chats.items():
            send(history)
            history += [{"role": "assistant", "content": None, "tool_calls": [{
                            "id": f"call_{name}", "type": "function",
                            "function": {"name": "get_weather",
                                         "arguments": '{"city":"paris"}'}}]},
                        {"role": "tool", "tool_call_id": f"call_{name}", "content": f"21C {name}"}]
        for history in chats.values():
            send(history)
        sent = up.llm.requests[-1]["messages"]
        assert sent[4]["tool_calls"][0]["function"]["arguments"] == '{"city": "paris"}'  # as written
    by_history = sorted(tuple(text for _, text in roles_and_text(sqlite_store, s.id))
                        for s in sqlite_store.list_sessions())
    assert by_history == [("hi", "hello", f"weather {n}", "", f"21C {n}", f"done: 21C {n}")
                          for n in "AB"]
    assert not any(sqlite_store.list_rewinds(s.id) for s in sqlite_store.list_sessions())


def test_a_conversation_derived_under_the_old_name_continues_in_its_session(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    """Sessions derived before the system prompt left the name (``legacy_ref``) are still
    found: an upgrade does not store running conversations again."""
    from refold.server.sessions import legacy_ref

    history: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "Capital of France?"}]
    old = sqlite_store.create_session(title=legacy_ref("", history), source="serve")
    sqlite_store.sync_messages(old.id, [history[1], {"role": "assistant", "content": "Paris."}])
    with serve(["On the Seine."]) as up:
        client = sdk(start_proxy(up).base_url)
        history += [{"role": "assistant", "content": "Paris."},
                    {"role": "user", "content": "River?"}]
        client.chat.completions.create(model="m", messages=history)
    assert only_session(sqlite_store) == old.id
    assert [t for _, t in roles_and_text(sqlite_store, old.id)] == [
        "Capital of France?", "Paris.", "River?", "On the Seine."]


CLEARED = "[Old tool result content cleared]"


@pytest.mark.parametrize("named", [False, True], ids=["derived", "named"])
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_old_tool_results_the_client_cleared_are_the_stored_ones_and_go_upstream_cleared(
        start_proxy: ProxyFactory, sqlite_store: Store, stream: bool, named: bool) -> None:
    """OpenCode with ``compaction.prune`` on re-sends the results of old tool calls as
    ``[Old tool result content cleared]`` once they pass its budget (request shapes as OpenCode
    1.18 sent them through ``refold serve``). Before, each such prune diverged from the stored
    results: a derived conversation forked a branch holding a copy of all of it (three prunes,
    three copies), a named one was rewound and stored again. The cleared result is the stored
    one (the ledger keeps what the tool said) and goes upstream as the client sent it, cleared:
    the context the client chose to send, not the one it cleared."""
    files = {f"big{n}.txt": f"<content>{n}: " + "x" * 4000 + "</content>" for n in range(4)}

    def call(n: int) -> dict[str, Any]:
        return {"id": f"call_{n}", "type": "function", "function": {
            "name": "read", "arguments": json.dumps({"filePath": f"/p/big{n}.txt"})}}

    replies: list[Any] = []
    for n in range(4):
        replies += [ScriptedReply(content=None, tool_calls=[call(n)]), f"Read big{n}."]
    headers = {"X-Refold-Session": "opencode-session"} if named else {}
    with serve(replies) as up:
        proxy = start_proxy(up)
        system = {"role": "system", "content": "You are opencode."}
        turns: list[list[dict[str, Any]]] = []  # each user turn as the client re-sends it
        for n in range(4):
            turn = [{"role": "user", "content": f'"please read big{n}"'}]
            for step in range(2):
                history = [system, *(m for t in turns for m in t), *turn]
                body = {"model": "local/scripted", "messages": history, "stream": stream,
                        "max_tokens": 4000}
                response = httpx.post(proxy.base_url + "/chat/completions", json=body,
                                      headers=headers, timeout=30)
                assert response.status_code == 200, response.text
                if step == 0:  # the Vercel AI SDK's spelling of the call, then its result
                    turn += [{"role": "assistant", "content": "", "tool_calls": [
                        {"id": f"call_{n}", "type": "function", "function": {
                            "name": "read",
                            "arguments": json.dumps({"filePath": f"/p/big{n}.txt"},
                                                    separators=(",", ":"))}}]},
                        {"role": "tool", "tool_call_id": f"call_{n}",
                         "content": files[f"big{n}.txt"]}]
                else:
                    turn.append({"role": "assistant", "content": f"Read big{n}."})
            turns.append(turn)
            for old in turns[:-1] if n >= 1 else []:  # OpenCode prunes: all but the last
                old[2] = {**old[2], "content": CLEARED}
        # what went upstream is what the client sent: cleared results cleared, others whole
        for request, sent_history in zip(up.llm.requests[2::2], range(1, 4), strict=True):
            tools = [m["content"] for m in request["messages"] if m["role"] == "tool"]
            assert len(tools) == sent_history
            cleared_now = {1: 0, 2: 1, 3: 2}[sent_history]
            assert tools[:cleared_now] == [CLEARED] * cleared_now
            assert all(t.startswith("<content>") for t in tools[cleared_now:])
    sessions = sqlite_store.list_sessions()
    assert len(sessions) == 1, [s.title for s in sessions]
    rows = sqlite_store.get_messages(sessions[0].id, include_inactive=True)
    assert [(r.role, r.active) for r in rows] == [
        ("user", True), ("assistant", True), ("tool", True), ("assistant", True)] * 4
    # the ledger keeps what each tool said
    assert [r.message["content"] for r in rows if r.role == "tool"] == list(files.values())
    assert not sqlite_store.list_rewinds(sessions[0].id)


@pytest.mark.parametrize(("status", "error", "expected"), [
    (404, {"message": "The model `gpt-9` does not exist", "type": "invalid_request_error",
           "code": "model_not_found", "param": None}, openai.NotFoundError),
    (400, {"message": "Unsupported parameter: 'max_tokens'", "type": "invalid_request_error",
           "code": "unsupported_parameter", "param": "max_tokens"}, openai.BadRequestError),
    (422, {"message": "unprocessable", "type": "invalid_request_error"},
     openai.UnprocessableEntityError)])
def test_an_upstreams_request_error_keeps_its_status_code_and_param(
        start_proxy: ProxyFactory, status: int, error: dict[str, Any], expected: type) -> None:
    """A 404 ``model_not_found`` reached the client as a 400 (its SDK raised BadRequestError,
    so a fallback to another model on NotFoundError caught nothing), and the upstream's
    ``code`` and ``param`` were replaced by ``upstream_bad_request``."""
    with serve([ScriptedReply(status=status, error={"error": error})]) as up:
        proxy = start_proxy(up)
        with pytest.raises(expected) as info:
            sdk(proxy.base_url).chat.completions.create(
                model="gpt-9", messages=[{"role": "user", "content": "hi"}])
    assert info.value.status_code == status
    body = info.value.body
    assert isinstance(body, dict)
    assert body.get("code") == (error.get("code") or "upstream_bad_request")
    if error.get("param"):
        assert body.get("param") == error["param"]


def test_a_long_history_runs_on_the_event_loop_and_a_heavy_new_message_in_a_worker(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    """An agent re-sends a history of hundreds of KB with each turn; what is new is small. Its
    turns run in light mode (a worker thread would only add hops: the work on the known
    history holds the GIL anywhere); a new message too heavy for the loop (a big tool output)
    is counted and stored from a worker thread. Every message is stored once either way."""
    from refold.runtime.inline import INLINE_NEW_CHARS

    with serve(["ok"] * 6) as up:
        proxy = start_proxy(up, context_length=2_000_000)  # (no compaction in this test)
        client = sdk(proxy.base_url)
        history: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "x" * 40_000}]
        for turn in range(5):
            client.chat.completions.create(model="m", messages=history)
            history += [{"role": "assistant", "content": "ok"},
                        {"role": "user", "content": f"{turn} " + "y" * 40_000}]
        big = {"role": "user", "content": "z" * (INLINE_NEW_CHARS + 1)}
        history[-1] = big  # the sixth turn's new message is heavy
        client.chat.completions.create(model="m", messages=history)
    pipeline = proxy.app.state.proxy_app.proxy
    # the first turn (no known history) and the heavy one in workers; the rest on the loop,
    # with bodies of 40 to 240 KB (a ledger that fsyncs each commit: every turn in a worker)
    light = sqlite_store.commits_are_quick  # type: ignore[attr-defined]
    assert (pipeline.light_prepares, pipeline.worker_prepares) == ((4, 2) if light else (0, 6))
    stored = roles_and_text(sqlite_store, only_session(sqlite_store))
    assert stored == [(m["role"], m["content"]) for m in history[1:]] + [("assistant", "ok")]
