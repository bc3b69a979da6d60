"""Turns a client drops from the history it sends next: a run the upstream failed, a stream it
hung up on, a side call's reply it does not keep.

Agent frameworks keep only the turns that succeeded: pydantic-ai's next run takes
``message_history=result.all_messages()`` of the last good run, so after a run that failed (an
upstream 429 its retries did not outlast) the next request re-sends the conversation without
the failed turn's message. The proxy had stored that message (as any message a client sent),
so the history diverged from the stored chain there and a derived session forked a branch
holding a copy of the whole conversation, once per failed turn. Now the failed turn is marked
and a history that drops exactly it rewinds it (reversibly) in the same session.

The requests below are the shapes pydantic-ai 2.78 (``OpenAIChatModel`` with
``OpenAIProvider(base_url=…)``) sent to ``refold serve`` when run against a scripted upstream:
``tool_choice: "auto"``, strict function tools with ``additionalProperties: false``, the
model's tool call re-sent with its arguments re-serialized compactly, ``stream_options`` with
``include_usage`` when streaming. The side call is LangGraph's structured response (last test).
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

SYSTEM = {"role": "system", "content": "You are a helpful agent. Use tools."}
TOOLS = [{"type": "function", "function": {
    "name": "add", "description": "Add two integers.",
    "parameters": {"additionalProperties": False, "properties": {
        "a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"], "type": "object"},
    "strict": True}}]
CALL = {"id": "call_a2", "type": "function",
        "function": {"name": "add", "arguments": '{"a": 2, "b": 40}'}}
RATE_LIMITED = ScriptedReply(status=429, headers={"Retry-After": "7"}, error={"error": {
    "message": "slow down", "type": "rate_limit_error", "code": "rate_limit_exceeded"}})


def call(client: openai.OpenAI, messages: list[dict[str, Any]], stream: bool) -> str | None:
    """One request as pydantic-ai makes it; the reply's text."""
    extra: dict[str, Any] = {"tool_choice": "auto", "tools": TOOLS}
    if not stream:
        reply = client.chat.completions.create(model="gpt-4o-mini", messages=messages,  # type: ignore[call-overload]
                                               **extra)
        return reply.choices[0].message.content  # type: ignore[no-any-return]
    chunks = client.chat.completions.create(model="gpt-4o-mini", messages=messages,  # type: ignore[call-overload]
                                            stream=True,
                                            stream_options={"include_usage": True}, **extra)
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def rows(store: Store, session_id: str) -> list[tuple[str, str, bool]]:
    return [(r.role, str(r.message.get("content") or ""), r.active)
            for r in store.get_messages(session_id, include_inactive=True)]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_history_that_drops_a_failed_turn_continues_its_session(
        start_proxy: ProxyFactory, sqlite_store: Store, stream: bool) -> None:
    drop_a_failed_turn(start_proxy, sqlite_store, stream)


def test_a_history_that_drops_a_failed_turn_continues_its_session_on_postgres(
        start_pg_proxy: ProxyFactory, postgres_store: Store) -> None:
    drop_a_failed_turn(start_pg_proxy, postgres_store, False)


def drop_a_failed_turn(start_proxy: ProxyFactory, store: Store, stream: bool) -> None:
    replies = [ScriptedReply(content=None, tool_calls=[CALL]), "It is 42.",
               RATE_LIMITED, "Hello again."]
    with serve(replies) as up:
        proxy = start_proxy(up)
        client = openai.OpenAI(base_url=proxy.base_url, api_key="none", max_retries=0)
        history: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "Add 2 and 40"}]
        assert call(client, history, stream) in ("", None)
        history += [{"role": "assistant", "content": None, "tool_calls": [
                        dict(CALL, function={"name": "add", "arguments": '{"a":2,"b":40}'})]},
                    {"role": "tool", "tool_call_id": "call_a2", "content": "42"}]
        assert call(client, history, stream) == "It is 42."
        history.append({"role": "assistant", "content": "It is 42."})

        with pytest.raises(openai.RateLimitError) as failed:
            call(client, [*history, {"role": "user", "content": "this one fails"}], stream)
        assert failed.value.response.headers["retry-after"] == "7"

        # the framework goes on from its last good run: the failed message is not in it
        history.append({"role": "user", "content": "and after the failure"})
        assert call(client, history, stream) == "Hello again."
        sent = up.llm.requests[-1]["messages"]

    sessions = store.list_sessions()
    assert len(sessions) == 1, [(s.title, s.link_kind) for s in sessions]  # no branch
    assert rows(store, sessions[0].id) == [
        ("user", "Add 2 and 40", True), ("assistant", "", True), ("tool", "42", True),
        ("assistant", "It is 42.", True),
        ("user", "this one fails", False),  # stored once, rewound: undo brings it back
        ("user", "and after the failure", True), ("assistant", "Hello again.", True)]
    assert [r.record.count for r in store.list_rewinds(sessions[0].id)] == [1]
    assert "this one fails" not in json.dumps(sent)
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "assistant",
                                         "user"]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_history_that_drops_a_run_that_failed_after_a_tool_step_continues_its_session(
        start_proxy: ProxyFactory, sqlite_store: Store, stream: bool) -> None:
    """The run fails on its second model call, after the model's call and the tool's result
    were stored: pydantic-ai drops the whole run (its message, the call, the result). Before,
    the next run forked a branch with a copy of the conversation."""
    replies = ["Hello.", ScriptedReply(content=None, tool_calls=[CALL]), RATE_LIMITED, "Bye."]
    with serve(replies) as up:
        proxy = start_proxy(up)
        client = openai.OpenAI(base_url=proxy.base_url, api_key="none", max_retries=0)
        history: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "hi"}]
        assert call(client, history, stream) == "Hello."
        history.append({"role": "assistant", "content": "Hello."})
        run = [{"role": "user", "content": "Add 2 and 40"}]
        call(client, history + run, stream)
        run += [{"role": "assistant", "content": None, "tool_calls": [
                    dict(CALL, function={"name": "add", "arguments": '{"a":2,"b":40}'})]},
                {"role": "tool", "tool_call_id": "call_a2", "content": "42"}]
        with pytest.raises(openai.RateLimitError):
            call(client, history + run, stream)
        history.append({"role": "user", "content": "never mind"})
        assert call(client, history, stream) == "Bye."
    sessions = sqlite_store.list_sessions()
    assert len(sessions) == 1, [(s.title, s.link_kind) for s in sessions]
    assert rows(sqlite_store, sessions[0].id) == [
        ("user", "hi", True), ("assistant", "Hello.", True),
        ("user", "Add 2 and 40", False), ("assistant", "", False), ("tool", "42", False),
        ("user", "never mind", True), ("assistant", "Bye.", True)]


def test_a_history_that_also_drops_an_answered_turn_is_an_edit_and_branches(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    """Only the failed run is taken back: a derived conversation that also leaves out a turn
    that was answered (an edit further back) goes to a branch as before."""
    with serve(["one", "two", RATE_LIMITED, "three"]) as up:
        proxy = start_proxy(up)
        client = openai.OpenAI(base_url=proxy.base_url, api_key="none", max_retries=0)
        history: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "q0"}]
        call(client, history, False)
        history += [{"role": "assistant", "content": "one"}, {"role": "user", "content": "q1"}]
        call(client, history, False)
        with pytest.raises(openai.RateLimitError):
            call(client, [*history, {"role": "assistant", "content": "two"},
                          {"role": "user", "content": "q2"}], False)
        call(client, [*history[:2], {"role": "user", "content": "edited"}], False)
    sessions = sqlite_store.list_sessions()
    assert sorted(s.link_kind or "" for s in sessions) == ["", "branch"]
    root = next(s for s in sessions if s.link_kind is None)
    assert [(text, active) for _, text, active in rows(sqlite_store, root.id)] == [
        ("q0", True), ("one", True), ("q1", True), ("two", True), ("q2", True)]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_retry_of_a_failed_turn_still_stores_it_once(
        start_proxy: ProxyFactory, sqlite_store: Store, stream: bool) -> None:
    """The other way a client goes on after a failure: it sends the same history again (the
    mark changes nothing: the history extends the chain), and a later turn that extends it
    rewinds nothing."""
    with serve(["one", RATE_LIMITED, RATE_LIMITED, "two", "three"]) as up:
        proxy = start_proxy(up)
        client = openai.OpenAI(base_url=proxy.base_url, api_key="none", max_retries=0)
        history: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "q0"}]
        assert call(client, history, stream) == "one"
        history += [{"role": "assistant", "content": "one"}, {"role": "user", "content": "q1"}]
        for _ in range(2):
            with pytest.raises(openai.RateLimitError):
                call(client, history, stream)
        assert call(client, history, stream) == "two"
        history += [{"role": "assistant", "content": "two"}, {"role": "user", "content": "q2"}]
        assert call(client, history, stream) == "three"
    sessions = sqlite_store.list_sessions()
    assert len(sessions) == 1
    assert rows(sqlite_store, sessions[0].id) == [
        ("user", "q0", True), ("assistant", "one", True), ("user", "q1", True),
        ("assistant", "two", True), ("user", "q2", True), ("assistant", "three", True)]


def test_a_conversation_that_merely_opens_alike_after_an_answered_turn_still_branches(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    """Only an unanswered tail is rewound: a second conversation opening with the same
    question as an answered one leaves that one's turns alone and gets its own branch."""
    with serve(["a1", "a2", "b2"]) as up:
        proxy = start_proxy(up)
        client = openai.OpenAI(base_url=proxy.base_url, api_key="none", max_retries=0)
        first = [SYSTEM, {"role": "user", "content": "q"}]
        call(client, first, False)
        first += [{"role": "assistant", "content": "a1"}, {"role": "user", "content": "more"}]
        call(client, first, False)
        other = [SYSTEM, {"role": "user", "content": "q"}, {"role": "assistant", "content": "a1"},
                 {"role": "user", "content": "something else"}]
        call(client, other, False)
    sessions = sqlite_store.list_sessions()
    assert sorted(s.link_kind or "" for s in sessions) == ["", "branch"]
    root = next(s for s in sessions if s.link_kind is None)
    assert all(active for _, _, active in rows(sqlite_store, root.id))
    assert [text for _, text, _ in rows(sqlite_store, root.id)] == ["q", "a1", "more", "a2"]


def test_a_history_that_drops_a_turn_the_client_left_mid_stream_continues_its_session(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    """A chat UI's stop button: the client hangs up mid-stream (nothing of the reply is
    recorded) and the user asks something else, without the abandoned question."""
    slow = ScriptedReply(content="A long answer that streams slowly. " * 10, chunk_delay=0.05)
    with serve(["Hello.", slow, "Sure."]) as up:
        proxy = start_proxy(up)
        client = openai.OpenAI(base_url=proxy.base_url, api_key="none", max_retries=0)
        history: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "hi"}]
        call(client, history, True)
        history.append({"role": "assistant", "content": "Hello."})
        with httpx.stream("POST", proxy.base_url + "/chat/completions", json={
                "model": "m", "stream": True,
                "messages": [*history, {"role": "user", "content": "tell me slowly"}]}) as response:
            for line in response.iter_lines():
                if "A long answer" in line:
                    break  # stop
        history.append({"role": "user", "content": "something else"})
        assert call(client, history, True) == "Sure."
    sessions = sqlite_store.list_sessions()
    assert len(sessions) == 1, [(s.title, s.link_kind) for s in sessions]
    assert rows(sqlite_store, sessions[0].id) == [
        ("user", "hi", True), ("assistant", "Hello.", True), ("user", "tell me slowly", False),
        ("user", "something else", True), ("assistant", "Sure.", True)]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_structured_response_side_call_the_agent_does_not_keep_stays_in_its_session(
        start_proxy: ProxyFactory, sqlite_store: Store, stream: bool) -> None:
    """LangGraph's ``create_react_agent(…, response_format=W)`` (langgraph-prebuilt 1.1):
    after the agent's final answer it asks again — the same messages without the system
    prompt, ending with that answer, with a ``json_schema`` ``response_format`` — and keeps
    the structured reply out of the messages it sends next. The next turn diverged from the
    stored chain at that reply: every turn forked a branch with a copy of the conversation
    (three turns: three sessions). Now that reply is rewound (kept, reversibly) and the
    conversation stays one session."""
    schema = {"type": "json_schema", "json_schema": {"name": "W", "strict": True, "schema": {
        "properties": {"city": {"title": "City", "type": "string"}}, "required": ["city"],
        "title": "W", "type": "object", "additionalProperties": False}}}
    replies = [ScriptedReply(content=None, tool_calls=[CALL]), "It is 42.", '{"city": "Paris"}',
               "Bye.", '{"city": "Rome"}']
    with serve(replies) as up:
        proxy = start_proxy(up)

        def send(messages: list[dict[str, Any]], **extra: Any) -> None:
            body = {"model": "gpt-4o-mini", "stream": stream, "messages": messages, **extra}
            response = httpx.post(proxy.base_url + "/chat/completions", json=body, timeout=30)
            assert response.status_code == 200, response.text

        history: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "Add 2 and 40"}]
        send(history, tools=TOOLS)
        history += [{"role": "assistant", "content": None, "tool_calls": [CALL]},
                    {"role": "tool", "tool_call_id": "call_a2", "content": "42"}]
        send(history, tools=TOOLS)
        history.append({"role": "assistant", "content": "It is 42."})
        send(history[1:], response_format=schema)  # the structured response: no system prompt
        history.append({"role": "user", "content": "thanks"})
        send(history, tools=TOOLS)
        history.append({"role": "assistant", "content": "Bye."})
        send(history[1:], response_format=schema)
        assert up.llm.requests[3]["messages"][1:] == history[1:6]  # no structured reply in it
    sessions = sqlite_store.list_sessions()
    assert len(sessions) == 1, [(s.title, s.link_kind) for s in sessions]
    assert rows(sqlite_store, sessions[0].id) == [
        ("user", "Add 2 and 40", True), ("assistant", "", True), ("tool", "42", True),
        ("assistant", "It is 42.", True), ("assistant", '{"city": "Paris"}', False),
        ("user", "thanks", True), ("assistant", "Bye.", True),
        ("assistant", '{"city": "Rome"}', True)]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_client_that_times_out_before_its_reply_then_retries_stores_it_once(
        start_one_proxy: ProxyFactory, tmp_path: Any, stream: bool) -> None:
    """The openai SDK's own timeout and retry: the client hangs up while the upstream is still
    working, then sends the same request again. The reply it never saw is not recorded (the
    upstream call is cut, so the session's lock goes to the retry at once) and the retry is
    answered in the same session: the question stored once, no branch."""
    from refold.store.sqlite import SQLiteStore

    with serve([ScriptedReply(content="too late", delay=2.0)],
               default=lambda _b: "in time") as up:
        proxy = start_one_proxy(up)
        history: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "the question"}]
        impatient = openai.OpenAI(base_url=proxy.base_url, api_key="none", max_retries=0,
                                  timeout=0.5)
        with pytest.raises(openai.APITimeoutError):
            call(impatient, history, stream)
        # (a retry that had to wait for the abandoned call's 2 s would time out here)
        patient = openai.OpenAI(base_url=proxy.base_url, api_key="none", max_retries=0,
                                timeout=1.5)
        assert call(patient, history, stream) == "in time"
    store = SQLiteStore(str(tmp_path / "refold.db"))
    try:
        sessions = store.list_sessions()
        assert len(sessions) == 1, [(s.title, s.link_kind) for s in sessions]
        assert [(role, text) for role, text, active in rows(store, sessions[0].id)
                if active] == [("user", "the question"), ("assistant", "in time")]
        assert "too late" not in {text for _, text, _ in rows(store, sessions[0].id)}
    finally:
        store.close()
