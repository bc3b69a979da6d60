"""A client that sends a sliding window of its history stays one conversation.

Agent frameworks trim what they send: the system message and the last N messages (LangChain's
``trim_messages(..., include_system=True)``, token-budgeted memories, chat UIs' "last N turns").
Each request whose window slid used to start a new derived session holding a copy of the
window (8 turns, system + last 5 messages: 6 sessions, 36 rows for 16 messages). A window
whose first messages are the stored session's tail now continues that session: each message
stored once, and the upstream still receives exactly the window (``refold.runtime.window``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anthropic
import httpx
import openai
import pytest

from refold.store import Store
from refold.testing import ScriptedReply, serve

ProxyFactory = Callable[..., Any]
Msg = dict[str, Any]
SYSTEM: Msg = {"role": "system", "content": "You are terse."}


def ask(client: openai.OpenAI, messages: list[Msg], stream: bool, **extra: Any
        ) -> tuple[Msg, str]:
    """One request; (the reply as the client keeps it, the X-Refold-Session answering)."""
    if not stream:
        raw = client.chat.completions.with_raw_response.create(
            model="m", messages=messages, **extra)  # type: ignore[arg-type]
        message = raw.parse().choices[0].message
        reply: Msg = {"role": "assistant", "content": message.content}
        if message.tool_calls:
            reply["tool_calls"] = [c.model_dump() for c in message.tool_calls]
        return reply, raw.headers["x-refold-session"]
    with client.chat.completions.with_streaming_response.create(
            model="m", messages=messages, stream=True, **extra) as raw:  # type: ignore[arg-type]
        text = ""
        for line in raw.iter_lines():
            if line.startswith("data: {"):
                for choice in json.loads(line[6:])["choices"]:
                    text += choice["delta"].get("content") or ""
        return {"role": "assistant", "content": text}, raw.headers["x-refold-session"]


def contents(store: Store, session_id: str, inactive: bool = False) -> list[str]:
    return [str(r.message.get("content")) for r in
            store.get_messages(session_id, include_inactive=inactive)]


def slide(start_proxy: ProxyFactory, store: Store, stream: bool, sizes: list[int],
          headers: dict[str, str] | None = None) -> None:
    """Turn i sends the system message and the last ``sizes[i % len(sizes)]`` messages."""
    turns = 8
    with serve([f"answer {i}" for i in range(turns)]) as up:
        proxy = start_proxy(up)
        client = openai.OpenAI(base_url=proxy.base_url, api_key="x", max_retries=0,
                               default_headers=headers)
        full: list[Msg] = []
        answered: set[str] = set()
        for i in range(turns):
            full.append({"role": "user", "content": f"question number {i} about topic {i * 7}"})
            window = [SYSTEM, *full[-sizes[i % len(sizes)]:]]
            reply, session = ask(client, window, stream)
            answered.add(session)
            assert up.llm.requests[-1]["messages"] == window  # the window, nothing else
            full.append(reply)
    sessions = store.list_sessions()
    assert len(sessions) == 1, [(s.title, s.link_kind) for s in sessions]
    assert answered == {sessions[0].id}
    assert contents(store, sessions[0].id, inactive=True) == [m["content"] for m in full]
    assert store.list_rewinds(sessions[0].id) == []


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_window_sliding_by_a_turn_stays_one_conversation(
        start_proxy: ProxyFactory, sqlite_store: Store, stream: bool) -> None:
    slide(start_proxy, sqlite_store, stream, [5])


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_window_sliding_by_odd_counts_stays_one_conversation(
        start_proxy: ProxyFactory, sqlite_store: Store, stream: bool) -> None:
    """Windows of 5, 4, 6 and 3 messages: they slide by 1 and 3 messages, and some start
    with the model's reply."""
    slide(start_proxy, sqlite_store, stream, [5, 4, 6, 3])


def test_a_sliding_window_stays_one_conversation_on_postgres(
        start_pg_proxy: ProxyFactory, postgres_store: Store) -> None:
    slide(start_pg_proxy, postgres_store, False, [5, 4])


def test_a_named_session_whose_client_slides_its_window_appends(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    """With ``X-Refold-Session`` the slid window forked a branch holding a copy of it each
    turn (it shares no start with the named conversation); it is appended now."""
    slide(start_proxy, sqlite_store, True, [5, 4], headers={"X-Refold-Session": "my-chat"})
    assert sqlite_store.list_sessions()[0].title == "my-chat"


def test_a_named_sliding_window_on_postgres(start_pg_proxy: ProxyFactory,
                                            postgres_store: Store) -> None:
    slide(start_pg_proxy, postgres_store, False, [3], headers={"X-Refold-Session": "pg-chat"})


def test_two_conversations_alike_stay_apart(start_proxy: ProxyFactory,
                                            sqlite_store: Store) -> None:
    """Same system prompt, questions that differ by a word, windows of the last 3 messages,
    turns interleaved: two sessions, each holding its own conversation once."""
    with serve([f"reply {i}" for i in range(12)]) as up:
        proxy = start_proxy(up)
        client = openai.OpenAI(base_url=proxy.base_url, api_key="x", max_retries=0)
        convs: dict[str, list[Msg]] = {"cats": [], "dogs": []}
        seen: dict[str, set[str]] = {"cats": set(), "dogs": set()}
        for i in range(6):
            for topic, conv in convs.items():
                conv.append({"role": "user", "content": f"Tell me fact {i} about {topic}."})
                window = [SYSTEM, *conv[-3:]]
                reply, session = ask(client, window, False)
                assert up.llm.requests[-1]["messages"] == window
                seen[topic].add(session)
                conv.append(reply)
    assert len(seen["cats"]) == 1 and len(seen["dogs"]) == 1
    assert seen["cats"] != seen["dogs"]
    assert len(sqlite_store.list_sessions()) == 2
    for topic, conv in convs.items():
        (session,) = seen[topic]
        assert contents(sqlite_store, session, inactive=True) == [m["content"] for m in conv]


def test_a_window_of_an_older_stretch_is_not_appended(start_proxy: ProxyFactory,
                                                      sqlite_store: Store) -> None:
    """A window that starts with stored messages followed by other stored ones (not the tail)
    is an edit, as a whole history's edit is: with no session named, a branch of the
    conversation that ends with the stretch it re-sends (rows copied up to there); the first
    one is left as it was."""
    with serve([f"reply {i}" for i in range(5)]) as up:
        proxy = start_proxy(up)
        client = openai.OpenAI(base_url=proxy.base_url, api_key="x", max_retries=0)
        conv: list[Msg] = []
        for i in range(3):
            conv.append({"role": "user", "content": f"step {i}"})
            reply, first = ask(client, [SYSTEM, *conv], False)
            conv.append(reply)
        edited = [SYSTEM, *conv[2:4], {"role": "user", "content": "step 2, said otherwise"}]
        _, other = ask(client, edited, False)
        assert up.llm.requests[-1]["messages"] == edited
    assert other != first
    assert contents(sqlite_store, first) == [m["content"] for m in conv]  # untouched
    assert contents(sqlite_store, other) == [*[m["content"] for m in [*conv[:2], *edited[1:]]],
                                             "reply 3"]
    assert sqlite_store.get_session(other).parent_session_id == first
    assert sqlite_store.list_rewinds(first) == []


def test_a_window_with_another_system_prompt_is_another_conversation(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    with serve([f"reply {i}" for i in range(4)]) as up:
        proxy = start_proxy(up)
        client = openai.OpenAI(base_url=proxy.base_url, api_key="x", max_retries=0)
        conv: list[Msg] = [{"role": "user", "content": "first"}]
        reply, first = ask(client, [SYSTEM, *conv], False)
        conv += [reply, {"role": "user", "content": "second"}]
        reply, same = ask(client, [SYSTEM, *conv], False)
        conv += [reply, {"role": "user", "content": "third"}]
        other_agent = {"role": "system", "content": "You are a different agent."}
        _, other = ask(client, [other_agent, *conv[-3:]], False)
    assert same == first and other != first


def test_another_keys_session_is_never_continued(start_proxy: ProxyFactory,
                                                 sqlite_store: Store) -> None:
    """Tenants: the same window sent with another client key is that key's own conversation."""
    keys = ["key-alpha-123", "key-beta-456"]
    with serve([f"reply {i}" for i in range(4)]) as up:
        proxy = start_proxy(up, api_keys=keys)
        alpha, beta = (openai.OpenAI(base_url=proxy.base_url, api_key=k, max_retries=0)
                       for k in keys)
        conv: list[Msg] = [{"role": "user", "content": "hello"}]
        reply, mine = ask(alpha, [SYSTEM, *conv], False)
        conv += [reply, {"role": "user", "content": "more"}]
        reply, _ = ask(alpha, [SYSTEM, *conv], False)
        conv += [reply, {"role": "user", "content": "and then?"}]
        _, theirs = ask(beta, [SYSTEM, *conv[-3:]], False)
    assert theirs != mine
    owners = {s.id: s.owner for s in sqlite_store.list_sessions()}
    assert owners[theirs] != owners[mine]
    assert contents(sqlite_store, mine) == ["hello", "reply 0", "more", "reply 1"]


CALL = {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": "{}"}}
TOOLS = [{"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_window_that_starts_with_a_tool_result_whose_call_slid_out(
        start_proxy: ProxyFactory, sqlite_store: Store, stream: bool) -> None:
    """The window starts with a tool's result, its call no longer in it: the session goes on,
    and the request goes upstream provider-valid — the orphan result left out, as any orphan
    result is, and the response says so."""
    replies = [ScriptedReply(content=None, tool_calls=[CALL]), "It says hi.", "Bye."]
    with serve(replies) as up:
        proxy = start_proxy(up)
        client = openai.OpenAI(base_url=proxy.base_url, api_key="x", max_retries=0)
        conv: list[Msg] = [{"role": "user", "content": "read it"}]
        call = {"role": "assistant", "content": None, "tool_calls": [CALL]}
        ask(client, [SYSTEM, *conv], False, tools=TOOLS)
        conv += [call, {"role": "tool", "tool_call_id": "call_1", "content": "hi"}]
        reply, first = ask(client, [SYSTEM, *conv], False, tools=TOOLS)
        conv += [reply, {"role": "user", "content": "thanks"}]
        window = [SYSTEM, *conv[2:]]  # the result, the answer, the new message
        raw = httpx.post(proxy.base_url + "/chat/completions", json={
            "model": "m", "messages": window, "tools": TOOLS, "stream": stream})
        assert raw.status_code == 200
        sent = up.llm.requests[-1]["messages"]
    assert raw.headers["x-refold-session"] == first
    assert sent == [SYSTEM, *conv[3:]]  # the orphan result is not sent
    assert "1 orphan removed" in raw.headers["x-refold-warnings"]
    assert contents(sqlite_store, first) == ["read it", "None", "hi", "It says hi.", "thanks",
                                             "Bye."]


def test_a_window_that_begins_with_a_tool_call_and_its_result(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    """The window's edge falls before the call: the pair goes upstream whole."""
    replies = [ScriptedReply(content=None, tool_calls=[CALL]), "It says hi.", "Bye."]
    with serve(replies) as up:
        proxy = start_proxy(up)
        client = openai.OpenAI(base_url=proxy.base_url, api_key="x", max_retries=0)
        conv: list[Msg] = [{"role": "user", "content": "read it"}]
        call = {"role": "assistant", "content": None, "tool_calls": [CALL]}
        ask(client, [SYSTEM, *conv], False, tools=TOOLS)
        conv += [call, {"role": "tool", "tool_call_id": "call_1", "content": "hi"}]
        reply, first = ask(client, [SYSTEM, *conv], True, tools=TOOLS)
        conv += [reply, {"role": "user", "content": "thanks"}]
        window = [SYSTEM, *conv[1:]]
        _, session = ask(client, window, False, tools=TOOLS)
        sent = up.llm.requests[-1]["messages"]
    assert session == first
    assert sent == window
    assert len(sqlite_store.get_messages(first)) == 6


def test_a_window_of_a_compacted_conversation_sends_the_window(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    """The conversation was compacted while the client sent all of it; then it sends only its
    last messages: what goes upstream is that window — not the checkpoint's summary of what
    came before it, which the client no longer sends."""
    history: list[Msg] = []
    for n in range(30):
        history += [{"role": "user", "content": f"Question {n}: tell me about topic {n}. "
                                                + "detail " * 40},
                    {"role": "assistant", "content": f"Answer {n}: " + "because " * 40}]
    history.append({"role": "user", "content": "And finally?"})
    with serve(["Finally, this.", "Short again."]) as up:
        proxy = start_proxy(up, context_length=3_000)
        client = openai.OpenAI(base_url=proxy.base_url, api_key="x", max_retries=0)
        raw = client.chat.completions.with_raw_response.create(
            model="m", messages=[SYSTEM, *history])  # type: ignore[arg-type]
        assert raw.headers.get("x-refold-compacted")  # compacted before the first reply
        first = raw.headers["x-refold-session"]
        history += [{"role": "assistant", "content": "Finally, this."},
                    {"role": "user", "content": "One more?"}]
        window = [SYSTEM, *history[-5:]]
        _, session = ask(client, window, False)
        sent = up.llm.requests[-1]["messages"]
    assert session == first
    assert sent == window
    assert len(sqlite_store.list_checkpoints(first)) >= 1
    assert len(sqlite_store.get_messages(first)) == len(history) + 1


def test_a_window_over_the_threshold_is_compacted_from_its_own_messages(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    """A window too big for the context is compacted as any request is — from the window's
    messages alone: nothing of what slid out of it reaches the upstream, not even summarized."""
    history: list[Msg] = [{"role": "user", "content": "EARLIEST question, never resent"},
                          {"role": "assistant", "content": "EARLIEST answer"}]
    for n in range(30):
        history += [{"role": "user", "content": f"Question {n}: tell me about topic {n}. "
                                                + "detail " * 40},
                    {"role": "assistant", "content": f"Answer {n}: " + "because " * 40}]
    with serve(["ok"] + ["later"] * 3) as up:
        proxy = start_proxy(up, context_length=100_000)
        client = openai.OpenAI(base_url=proxy.base_url, api_key="x", max_retries=0)
        # the whole conversation, stored in a roomy context first
        first = ask(client, [SYSTEM, *history, {"role": "user", "content": "go on"}],
                    False)[1]
    history += [{"role": "user", "content": "go on"}, {"role": "assistant", "content": "ok"},
                {"role": "user", "content": "now a window"}]
    with serve(["done"]) as up:
        proxy = start_proxy(up, context_length=3_000)
        client = openai.OpenAI(base_url=proxy.base_url, api_key="x", max_retries=0)
        window = [SYSTEM, *history[4:]]  # the earliest exchange slid out
        raw = client.chat.completions.with_raw_response.create(
            model="m", messages=window)  # type: ignore[arg-type]
        sent = up.llm.requests[-1]["messages"]
    assert raw.headers["x-refold-session"] == first
    assert raw.headers.get("x-refold-compacted")
    assert "EARLIEST" not in json.dumps(sent)
    assert sent[-1] == window[-1] and len(sent) < len(window)
    assert len(sqlite_store.get_messages(first)) == len(history) + 1


def test_the_messages_api_shares_the_sliding_window(start_proxy: ProxyFactory,
                                                    sqlite_store: Store) -> None:
    """``POST /v1/messages`` goes the same way: one conversation, the window sent."""
    with serve([f"answer {i}" for i in range(6)]) as up:
        proxy = start_proxy(up)
        sdk = anthropic.Anthropic(base_url=proxy.root, api_key="x", max_retries=0, timeout=30)
        full: list[Msg] = []
        for i in range(6):
            full.append({"role": "user", "content": f"question {i}"})
            window = full[-3:]  # (each window starts with a user's message, as Anthropic's do)
            reply = sdk.messages.create(model="claude-x", max_tokens=50, system="Be terse.",
                                        messages=window)  # type: ignore[arg-type]
            sent = up.llm.requests[-1]["messages"]
            assert [m["content"] for m in sent[1:]] == [m["content"] for m in window]
            full.append({"role": "assistant",
                         "content": reply.content[0].text})  # type: ignore[union-attr]
    sessions = sqlite_store.list_sessions()
    assert len(sessions) == 1, [s.title for s in sessions]
    assert contents(sqlite_store, sessions[0].id) == [m["content"] for m in full]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_named_windows_regenerate_and_edit_rewind_the_named_session(
        start_proxy: ProxyFactory, sqlite_store: Store, stream: bool) -> None:
    """A client that sends its last 4 messages under ``X-Refold-Session`` regenerates an
    answer (the same window again) and edits its last question (the window with that
    message changed). Each forked a branch holding a copy of the window (the window shares
    no start with the named conversation, so it was taken for a side call): 3 sessions, 26
    rows for 16 messages. As for a whole history, it is a reversible rewind of the named
    session now: one session, each message once, the replaced ones rewound, not lost."""
    with serve([f"answer {i}" for i in range(12)]) as up:
        proxy = start_proxy(up)
        client = openai.OpenAI(base_url=proxy.base_url, api_key="x", max_retries=0,
                               default_headers={"X-Refold-Session": "win-chat"})
        full: list[Msg] = []
        replaced: list[str] = []
        answered: set[str] = set()
        for i in range(7):
            full.append({"role": "user", "content": f"question {i} about topic {i * 7}"})
            window = [SYSTEM, *full[-4:]]
            reply, session = ask(client, window, stream)
            answered.add(session)
            if i == 3:  # regenerate: the same window once more
                replaced.append(str(reply["content"]))
                reply, session = ask(client, window, stream)
                answered.add(session)
                assert up.llm.requests[-1]["messages"] == window
            full.append(reply)
            if i == 5:  # edit the last question: the window with it changed
                replaced += [str(full[-2]["content"]), str(reply["content"])]
                full[-2:] = [{"role": "user", "content": f"question {i}, said otherwise"}]
                window = [SYSTEM, *full[-4:]]
                reply, session = ask(client, window, stream)
                answered.add(session)
                assert up.llm.requests[-1]["messages"] == window
                full.append(reply)
    sessions = sqlite_store.list_sessions()
    assert [s.title for s in sessions] == ["win-chat"]
    assert answered == {sessions[0].id}
    assert contents(sqlite_store, sessions[0].id) == [m["content"] for m in full]
    stored = contents(sqlite_store, sessions[0].id, inactive=True)
    assert sorted(stored) == sorted([m["content"] for m in full] + replaced)
    assert len(sqlite_store.list_rewinds(sessions[0].id)) == 2


LONG = "Here is what I found after reading the whole module carefully: " + "detail " * 30


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("long_replies", [True, False], ids=["long-replies", "short-replies"])
def test_a_window_that_starts_at_the_last_reply(start_proxy: ProxyFactory, sqlite_store: Store,
                                               stream: bool, long_replies: bool) -> None:
    """LangChain's ``trim_messages`` without ``start_on`` cuts at any message and often starts
    the window at the last reply: the window shares one message with the stored tail. A long
    reply (or one calling tools: ids are unique) is no other conversation's end, so the window
    continues its session; a short one ("Done.") may be, so it opens a conversation of its own
    (each window then stored as before: nothing is merged into another conversation)."""
    turns = 5
    answers = [(f"{LONG} ({i})" if long_replies else f"Done {i}.") for i in range(turns)]
    with serve(answers) as up:
        proxy = start_proxy(up)
        client = openai.OpenAI(base_url=proxy.base_url, api_key="x", max_retries=0)
        full: list[Msg] = []
        for i in range(turns):
            full.append({"role": "user", "content": f"question number {i}"})
            window = [SYSTEM, *full[-2:]]  # the last reply and the new question
            reply, _ = ask(client, window, stream)
            assert up.llm.requests[-1]["messages"] == window
            full.append(reply)
    sessions = sqlite_store.list_sessions()
    if long_replies:
        assert len(sessions) == 1, [s.title for s in sessions]
        assert contents(sqlite_store, sessions[0].id, inactive=True) == [
            m["content"] for m in full]
    else:
        assert len(sessions) == turns  # the first conversation, then one per window


def test_which_replies_are_distinctive_enough_to_continue_a_window_alone() -> None:
    from refold.runtime.window import distinctive

    call = {"id": "call_Xy12ab34cd", "type": "function",
            "function": {"name": "read", "arguments": "{}"}}
    assert distinctive({"role": "assistant", "content": None, "tool_calls": [call]})
    assert distinctive({"role": "assistant", "content": LONG})
    assert not distinctive({"role": "assistant", "content": "Done."})
    assert not distinctive({"role": "assistant", "content": None,
                            "tool_calls": [dict(call, id="c1")]})  # an id a client made up
    assert not distinctive({"role": "user", "content": LONG})


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_window_whose_system_prompt_slid_out_continues_its_session(
        start_proxy: ProxyFactory, sqlite_store: Store, stream: bool) -> None:
    """pydantic-ai's history processors keep the last N messages, and its system prompt is a
    part of the first request: once that slides out, the windows carry no system message.
    They matched no stored prompt and each opened a conversation holding a copy (N=3: 7
    sessions). A window without a system message may continue a session that has one; the
    upstream gets the window as sent, without it."""
    turns = 6
    with serve([f"answer {i}" for i in range(turns)]) as up:
        proxy = start_proxy(up)
        client = openai.OpenAI(base_url=proxy.base_url, api_key="x", max_retries=0)
        full: list[Msg] = []
        for i in range(turns):
            full.append({"role": "user", "content": f"question number {i} about topic {i * 7}"})
            window = [SYSTEM, *full] if i < 2 else full[-3:]  # then the system prompt slid out
            reply, _ = ask(client, window, stream)
            assert up.llm.requests[-1]["messages"] == window
            full.append(reply)
    sessions = sqlite_store.list_sessions()
    assert len(sessions) == 1, [s.title for s in sessions]
    assert contents(sqlite_store, sessions[0].id, inactive=True) == [m["content"] for m in full]


def test_a_window_with_another_system_prompt_still_opens_its_own(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    """A system message that differs from the session's is another agent's (or a changed
    one's, which a whole history would show): no window match."""
    with serve(["a0", "a1", "a2"]) as up:
        client = openai.OpenAI(base_url=start_proxy(up).base_url, api_key="x", max_retries=0)
        full: list[Msg] = [{"role": "user", "content": "question zero"}]
        full.append(ask(client, [SYSTEM, *full], False)[0])
        full.append({"role": "user", "content": "question one"})
        full.append(ask(client, [SYSTEM, *full], False)[0])
        full.append({"role": "user", "content": "question two"})
        other = {"role": "system", "content": "You are a pirate."}
        ask(client, [other, *full[-3:]], False)
    assert len(sqlite_store.list_sessions()) == 2


def test_a_window_whose_only_reply_is_a_call_the_client_respelled(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    """pydantic-ai re-serializes a call's arguments compactly (``{"city":"paris"}`` for the
    provider's ``{"city": "paris"}``) and keeps the last N messages: a window of the question,
    the call and its result has only that call for a reply, and the candidate lookup (by the
    start of the stored reply's text) found nothing — a conversation of its own per window
    (pydantic-ai, keep-last-3: 7 sessions, 31 rows; now 4, 25: the rest share too little)."""
    call = {"id": "call_8sY2kq0ZbW3nT5vX1cJ7mL4d", "type": "function",
            "function": {"name": "weather", "arguments": '{"city": "paris"}'}}
    replies = ["Hello.", ScriptedReply(content=None, tool_calls=[call]), "Sunny in Paris."]
    with serve(replies) as up:
        client = openai.OpenAI(base_url=start_proxy(up).base_url, api_key="x", max_retries=0)
        full: list[Msg] = [{"role": "user", "content": "hi"}]
        full.append(ask(client, [SYSTEM, *full], False)[0])
        full.append({"role": "user", "content": "weather in paris?"})
        ask(client, [SYSTEM, *full], False, tools=TOOLS)
        full += [{"role": "assistant", "content": None, "tool_calls": [
                     dict(call, function={"name": "weather", "arguments": '{"city":"paris"}'})]},
                 {"role": "tool", "tool_call_id": call["id"], "content": "sunny"}]
        window = full[-3:]  # the question, the call, its result: the system prompt slid out
        ask(client, window, False, tools=TOOLS)
        # the call goes as the model wrote it (a re-spelled reply is the stored one, as on
        # every path), the rest as sent
        assert up.llm.requests[-1]["messages"] == [window[0], {
            "role": "assistant", "content": None, "tool_calls": [call]}, window[2]]
    sessions = sqlite_store.list_sessions()
    assert len(sessions) == 1, [s.title for s in sessions]
    assert [r.role for r in sqlite_store.get_messages(sessions[0].id)] == [
        "user", "assistant", "user", "assistant", "tool", "assistant"]



def _windowed_turns(start_proxy: ProxyFactory, turns: int, size: int, alike: bool = False,
                    **settings: Any
                    ) -> tuple[list[Msg], list[list[Msg]], list[list[Msg]], list[str]]:
    """``turns`` turns, each sending the system message and the last ``size`` messages of a
    conversation whose windows are over an 8,000-token context's threshold once full: (the
    whole conversation, the windows sent, what the upstream received, the session that
    answered each turn)."""
    full: list[Msg] = []
    windows: list[list[Msg]] = []
    answered: list[str] = []
    replies = ["Answer: " + "because " * 100 if alike else f"Answer {i}: " + "because " * 100
               for i in range(turns)]  # (alike: every reply worded the same)
    with serve(replies) as up:
        proxy = start_proxy(up, context_length=8_000, **settings)
        client = openai.OpenAI(base_url=proxy.base_url, api_key="x", max_retries=0)
        for i in range(turns):
            full.append({"role": "user", "content": f"Question {i}: tell me about topic {i}. "
                                                    + "detail " * 100})
            window = [SYSTEM, *full[-size:]]
            windows.append(window)
            reply, session = ask(client, window, False)
            answered.append(session)
            full.append(reply)
        sent = [r["messages"] for r in up.llm.requests]
    for window, request in zip(windows, sent, strict=True):
        # what goes up: the window's own messages in order, a stretch of them replaced by the
        # summary; never a message of the conversation that slid out of the window
        own = iter(window)
        assert all(any(m == w for w in own) for m in request if m in window)  # in order
        assert request[0] == SYSTEM and request[-1] == window[-1]
        others = [m for m in request if m not in window]
        assert len(others) <= 1
        assert all(m not in full for m in others)
        assert all("summary" in str(m.get("content")).lower() for m in others), others
        assert len(request) < len(window) or not others
    return full, windows, sent, answered


def test_a_window_over_the_threshold_is_not_compacted_again_at_every_slide(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    """Every full window is over the threshold and slides by one exchange a turn. The
    checkpoint planned from one window keeps standing for the stretch it summarized while the
    next windows still start inside that stretch, so the windowed turns compact as often as
    the same conversation sent whole does — not at every turn (40 summaries in 40 windowed
    turns before: with an LLM summarizer, a paid summary call per turn)."""
    _compacted_per_window_full(start_proxy, sqlite_store)


def test_a_window_keeps_its_checkpoint_on_postgres(start_pg_proxy: ProxyFactory,
                                                   postgres_store: Store) -> None:
    _compacted_per_window_full(start_pg_proxy, postgres_store)


def _compacted_per_window_full(start: ProxyFactory, store: Store) -> None:
    turns, size = 60, 40
    full, _, _, answered = _windowed_turns(start, turns, size)
    assert len(set(answered)) == 1
    session = answered[0]
    checkpoints = store.list_checkpoints(session)
    whole = [c for c in checkpoints if c.details.get("window") is None]
    slid = [c for c in checkpoints if c.details.get("window") is not None]
    windowed_turns = turns - size // 2
    assert whole and slid
    assert len(slid) <= windowed_turns // 2, len(slid)
    assert contents(store, session, inactive=True) == [m["content"] for m in full]
    for checkpoint in slid:
        assert checkpoint.first_seq <= checkpoint.details["window"] <= checkpoint.last_seq


@pytest.mark.parametrize("alike", [False, True], ids=["replies", "replies-alike"])
def test_a_sliding_window_follows_its_conversation_across_rotations(
        start_proxy: ProxyFactory, sqlite_store: Store, alike: bool) -> None:
    """With ``rotate_on_compaction`` each compaction continues the conversation in a child
    session holding the summary and the kept rows. A window that still starts before those
    rows — in the stretch the summary stands for — used to continue the ended parent's tail
    (storing the child's messages there a second time) or open a conversation of its own
    holding a copy of the window (60 turns: 22 sessions, a root of 119 rows). It now goes on
    in the newest child: one lineage, each message the client sent stored once in it — also
    when every reply is worded alike (a window's message at the covered count was then taken
    for the last covered one, and the window read as a whole history forked a branch)."""
    from refold.runtime.rotation import load_info

    turns, size = 60, 40
    full, _, _, answered = _windowed_turns(start_proxy, turns, size, alike,
                                           rotate_on_compaction=True)
    sessions = {s.id: s for s in sqlite_store.list_sessions()}
    roots = [s for s in sessions.values() if s.parent_session_id is None]
    assert len(roots) == 1
    assert all(s.link_kind == "compaction" for s in sessions.values() if s is not roots[0])
    lineage = [roots[0].id]
    children = {s.parent_session_id: s.id for s in sessions.values() if s.parent_session_id}
    assert len(children) == len(sessions) - 1  # a chain: no session has two children
    while lineage[-1] in children:
        lineage.append(children[lineage[-1]])
    assert len(lineage) == len(sessions) > 10
    own: list[str] = []
    for session_id in lineage:
        info = load_info(sqlite_store, session_id)
        own += contents(sqlite_store, session_id, inactive=True)[info.carried if info else 0:]
    assert own == [m["content"] for m in full]
    assert answered[-1] == lineage[-1]
    order = [lineage.index(s) for s in answered]
    assert order == sorted(order)  # never back to an ended parent


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_an_unnamed_window_sent_again_continues_in_a_branch(
        start_proxy: ProxyFactory, sqlite_store: Store, stream: bool) -> None:
    """No session named; the client sends its last window again (the answer regenerated, or
    the same request retried after its reply was stored). It goes upstream as sent, and the
    ledger keeps it in a branch of the conversation that ends with the stretch it re-sends —
    the conversation's own tail is never rewound, and the next window continues the branch.
    It opened an unlinked conversation holding a copy of the window before, so a search
    found its messages twice."""
    from refold.store.base import SearchQuery

    with serve([f"answer {i}" for i in range(8)]) as up:
        proxy = start_proxy(up)
        client = openai.OpenAI(base_url=proxy.base_url, api_key="x", max_retries=0)
        full: list[Msg] = []
        for i in range(6):
            full.append({"role": "user", "content": f"question number {i} about zebra{i}"})
            window = [SYSTEM, *full[-5:]]
            reply, first = ask(client, window, stream)
            full.append(reply)
        stored = contents(sqlite_store, first)
        again, branch = ask(client, window, stream)
        assert up.llm.requests[-1]["messages"] == window
        full[-1] = again
        full.append({"role": "user", "content": "question number 7 about zebra7"})
        window = [SYSTEM, *full[-5:]]
        reply, after = ask(client, window, stream)
        assert up.llm.requests[-1]["messages"] == window
        full.append(reply)
    assert branch != first and after == branch
    assert contents(sqlite_store, first, inactive=True) == stored  # its tail untouched
    assert sqlite_store.list_rewinds(first) == []
    child = sqlite_store.get_session(branch)
    assert (child.parent_session_id, child.link_kind) == (first, "branch")
    assert contents(sqlite_store, branch) == [m["content"] for m in full]
    assert len(sqlite_store.list_sessions()) == 2
    assert len(sqlite_store.search(SearchQuery("zebra4"))) == 1


def test_a_window_sliding_on_is_found_in_memory_not_looked_up_each_turn(
        start_proxy: ProxyFactory, sqlite_store: Store,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each turn of an unnamed client trimming its history opens under a new derived name.
    Once its window was placed (a store lookup), the next ones slide on from the window that
    session's runtime stored last: found in memory, the lookup never runs again. A second
    client alike but for its words, and a third whose system prompt differs, stay apart."""
    import refold.runtime.window as window_module

    lookups: list[int] = []
    real_find = window_module.find_window

    def counted(*args: Any, **kwargs: Any) -> Any:
        lookups.append(1)
        return real_find(*args, **kwargs)

    monkeypatch.setattr(window_module, "find_window", counted)
    other_system: Msg = {"role": "system", "content": "You are verbose."}
    with serve([f"reply {i}" for i in range(60)]) as up:
        proxy = start_proxy(up)
        client = openai.OpenAI(base_url=proxy.base_url, api_key="x", max_retries=0)
        convs: dict[str, list[Msg]] = {"cats": [], "dogs": [], "owls": []}
        seen: dict[str, set[str]] = {name: set() for name in convs}
        for i in range(12):
            if i == 6:
                first_half = len(lookups)
            for topic, conv in convs.items():
                conv.append({"role": "user", "content": f"Tell me fact {i} about {topic}."})
                system = other_system if topic == "owls" else SYSTEM
                window = [system, *conv[-5:]]
                reply, session = ask(client, window, i % 2 == 0)
                assert up.llm.requests[-1]["messages"] == window
                seen[topic].add(session)
                conv.append(reply)
    assert all(len(ids) == 1 for ids in seen.values())
    assert len({next(iter(ids)) for ids in seen.values()}) == 3
    assert len(sqlite_store.list_sessions()) == 3
    for topic, conv in convs.items():
        (session,) = seen[topic]
        assert contents(sqlite_store, session, inactive=True) == [m["content"] for m in conv]
    assert first_half > 0  # the first slides were placed by the lookup...
    assert len(lookups) == first_half  # ...and none of the later ones needed it
