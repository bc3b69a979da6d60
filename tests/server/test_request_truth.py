"""The request is the truth: what the upstream receives is what the client sent.

The cases that broke it (issue 11), each with the real OpenAI SDK over a socket, JSON and
streamed: a new conversation that starts like an old one, the same request twice, a restarted
agent reusing ``X-Refold-Session``, two unrelated conversations with the same opening and no
header. The scripted upstream logs every request body; the ledger is read back after.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import pytest

from refold.store import Store
from refold.testing import RunningLLM, ScriptedReply, serve

ProxyFactory = Callable[..., Any]
Msg = dict[str, Any]


def sdk(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="none", max_retries=0, timeout=30)


def ask(client: openai.OpenAI, messages: list[Msg], stream: bool,
        session: str | None = None) -> tuple[str, str]:
    """(the reply text, the X-Refold-Session the proxy answered with)."""
    headers = {"X-Refold-Session": session} if session else {}
    raw = client.chat.completions.with_raw_response.create(
        model="scripted-model", messages=messages, stream=stream,  # type: ignore[arg-type]
        extra_headers=headers)
    sid = raw.headers["x-refold-session"]
    parsed: Any = raw.parse()
    if stream:
        return "".join(c.choices[0].delta.content or "" for c in parsed if c.choices), sid
    return str(parsed.choices[0].message.content), sid


def sent(llm: RunningLLM, index: int = -1) -> list[tuple[str, str]]:
    """The conversation the upstream received in request ``index`` (system aside)."""
    return [(m["role"], str(m.get("content"))) for m in llm.llm.requests[index]["messages"]
            if m["role"] != "system"]


def pairs(messages: list[Msg]) -> list[tuple[str, str]]:
    return [(m["role"], str(m["content"])) for m in messages if m["role"] != "system"]


def active(store: Store, session_id: str) -> list[tuple[str, str]]:
    return [(r.role, str(r.message.get("content"))) for r in store.get_messages(session_id)]


Q = {"role": "user", "content": "What is 2+2?"}
LONG = [Q, {"role": "assistant", "content": "4."},
        {"role": "user", "content": "Now delete the production database."}]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_new_conversation_that_starts_like_an_old_one_gets_only_its_own_messages(
        start_proxy: ProxyFactory, sqlite_store: Store, stream: bool) -> None:
    with serve(["4.", "I will not.", "4, again."]) as up:
        client = sdk(start_proxy(up).base_url)
        ask(client, [Q], stream)
        ask(client, LONG, stream)
        reply, sid = ask(client, [Q], stream)  # a new conversation, the same opening
        assert sent(up) == [("user", "What is 2+2?")]
        assert reply == "4, again."
    # the old conversation is intact: nothing of it was rewound
    sessions = {s.id for s in sqlite_store.list_sessions()}
    assert any(active(sqlite_store, s) == [*pairs(LONG), ("assistant", "I will not.")]
               for s in sessions)
    assert active(sqlite_store, sid) == [("user", "What is 2+2?"), ("assistant", "4, again.")]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_the_same_request_twice_sends_the_same_messages_twice(
        start_proxy: ProxyFactory, sqlite_store: Store, stream: bool) -> None:
    history = [{"role": "system", "content": "Be terse."}, Q]
    with serve(["4.", "Four."]) as up:
        client = sdk(start_proxy(up).base_url)
        ask(client, history, stream)
        _, sid = ask(client, history, stream)  # a retry (the client never saw the first reply)
        assert sent(up, 0) == sent(up, 1) == [("user", "What is 2+2?")]
    stored = sqlite_store.get_messages(sid)
    assert [r.role for r in stored] == ["user", "assistant"]  # the question once, on its branch


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_restarted_agent_reusing_its_session_name_is_answered_from_what_it_sent(
        start_proxy: ProxyFactory, sqlite_store: Store, stream: bool) -> None:
    with serve(["4.", "I will not.", "Still 4."]) as up:
        client = sdk(start_proxy(up).base_url)
        ask(client, [Q], stream, session="agent-7")
        ask(client, LONG, stream, session="agent-7")
        reply, sid = ask(client, [Q], stream, session="agent-7")  # restarted from scratch
        assert sent(up) == [("user", "What is 2+2?")]
        assert reply == "Still 4."
    assert active(sqlite_store, sid) == [("user", "What is 2+2?"), ("assistant", "Still 4.")]
    rewinds = sqlite_store.list_rewinds(sid)  # the named session's old tail: reversible
    assert len(rewinds) == 1 and len(rewinds[0].seqs) == 3


def test_an_edit_in_a_named_session_can_be_undone(start_proxy: ProxyFactory,
                                                  sqlite_store: Store) -> None:
    """README: an edit in a named session is a reversible rewind. The edit's own messages were
    appended after the rewind in the same transaction, so undoing it was always refused
    ("changed since"); now the undo brings the old tail back and rewinds the edited one, which
    can be undone in turn."""
    first = [Q, {"role": "assistant", "content": "4."},
             {"role": "user", "content": "Which port?"}]
    edited = [*first[:2], {"role": "user", "content": "Which host?"}]
    with serve(["4.", "Port 5432.", "Host db1."]) as up:
        client = sdk(start_proxy(up).base_url)
        ask(client, [Q], False, session="edits")
        ask(client, first, False, session="edits")
        _, sid = ask(client, edited, False, session="edits")
    assert active(sqlite_store, sid) == [*pairs(edited), ("assistant", "Host db1.")]
    (rewind,) = [r.record for r in sqlite_store.list_rewinds(sid) if r.seqs]
    undone = sqlite_store.undo_rewind(rewind.id)
    assert active(sqlite_store, sid) == [*pairs(first), ("assistant", "Port 5432.")]
    assert undone.replaced_by is not None
    sqlite_store.undo_rewind(undone.replaced_by)  # and back
    assert active(sqlite_store, sid) == [*pairs(edited), ("assistant", "Host db1.")]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_side_calls_under_the_same_name_never_rewind_the_named_conversation(
        start_proxy: ProxyFactory, sqlite_store: Store, stream: bool) -> None:
    """An agent that puts one X-Refold-Session on every request also sends its side calls
    (Claude Code's title and topic requests, a sub-agent's task) under it: each is another
    conversation, in its own branch. Each rewound the whole named conversation before, which
    its next turn then stored again (106 rows for 26 messages in eight turns)."""
    main: list[Msg] = [{"role": "system", "content": "You are a coding agent."},
                       {"role": "user", "content": "fix the failing test in parser.py"}]
    with serve(default=lambda body: f"reply {len(body['messages'])}") as up:
        client = sdk(start_proxy(up).base_url)
        for turn in range(4):
            reply, main_sid = ask(client, main, stream, session="proj")
            assert sent(up) == pairs(main)
            main += [{"role": "assistant", "content": reply},
                     {"role": "user", "content": f"now step {turn}"}]
            side = [{"role": "user", "content": f"Write a 5-word title for: step {turn}"}]
            _, side_sid = ask(client, side, stream, session="proj")
            assert sent(up) == pairs(side)  # nothing of the named conversation
            assert side_sid != main_sid
            assert active(sqlite_store, side_sid) == [*pairs(side), ("assistant", "reply 1")]
        reply, sid = ask(client, main, stream, session="proj")
        assert sent(up) == pairs(main)
    assert sid == main_sid == sqlite_store.resolve_session("proj", prefix=False).id
    assert active(sqlite_store, sid) == [*pairs(main), ("assistant", reply)]  # once each
    assert not any(r.seqs for s in sqlite_store.list_sessions()
                   for r in sqlite_store.list_rewinds(s.id))
    assert sum(s.message_count for s in sqlite_store.list_sessions()) == len(main) - 1 + 1 + 8


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_two_conversations_with_the_same_opening_never_rewind_each_other(
        start_proxy: ProxyFactory, sqlite_store: Store, stream: bool) -> None:
    a: list[Msg] = [Q]
    b: list[Msg] = [Q]
    with serve(default=lambda body: f"reply {len(body['messages'])}") as up:
        client = sdk(start_proxy(up).base_url)
        for turn in range(3):
            for name, conv in (("a", a), ("b", b)):
                reply, _ = ask(client, conv, stream)
                assert sent(up) == pairs(conv)
                conv += [{"role": "assistant", "content": reply},
                         {"role": "user", "content": f"{name} asks {turn}"}]
    chains = sorted(active(sqlite_store, s.id) for s in sqlite_store.list_sessions())
    expected = sorted(pairs(conv[:-1]) for conv in (a, b))
    assert [c for c in chains if c in expected] == expected  # each conversation, whole
    for s in sqlite_store.list_sessions():
        assert not any(r.seqs for r in sqlite_store.list_rewinds(s.id))  # nothing rewound


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_an_upstream_429_passes_retry_after_and_rate_limit_headers(
        start_proxy: ProxyFactory, stream: bool) -> None:
    limited = ScriptedReply(status=429, headers={"Retry-After": "3",
                                                 "x-ratelimit-remaining-tokens": "0"},
                            error={"error": {"message": "slow down", "type": "rate_limit"}})
    with serve([limited]) as up:
        client = sdk(start_proxy(up).base_url)
        with pytest.raises(openai.RateLimitError) as caught:
            ask(client, [Q], stream)
    assert caught.value.response.headers["retry-after"] == "3"
    assert caught.value.response.headers["x-ratelimit-remaining-tokens"] == "0"


def test_an_overflow_retry_reports_its_compaction(start_proxy: ProxyFactory) -> None:
    import httpx

    overflow = ScriptedReply(status=400, error={"error": {
        "message": "This model's maximum context length is 8192 tokens",
        "type": "invalid_request_error", "code": "context_length_exceeded"}})
    history: list[Msg] = []
    for i in range(12):
        history += [{"role": "user", "content": f"step {i}: " + "explain the logs " * 60},
                    {"role": "assistant", "content": f"answer {i}: " + "the logs say " * 60}]
    history.append({"role": "user", "content": "and now?"})
    with serve([overflow, "Done."]) as up:
        proxy = start_proxy(up, context_length=20_000)
        response = httpx.post(f"{proxy.base_url}/chat/completions", timeout=60,
                              json={"model": "m", "messages": history})
    assert response.status_code == 200, response.text
    before, after = map(int, response.headers["x-refold-compacted"].split("->"))
    assert after < before
    assert len(up.llm.requests) == 2
    assert len(up.llm.requests[1]["messages"]) < len(up.llm.requests[0]["messages"])
