"""An agent's own conversation id (Claude Code's ``X-Claude-Code-Session-Id``, OpenCode's
``x-session-id``, Codex's ``session-id``) keeps its conversations that open alike apart.

OpenCode restarts each conversation from "What did we do so far?" after its own compaction:
through ``refold serve`` every project's continuation became a branch of the first project's
(``sessions export --lineage`` of one led with another project's session), and two Codex or
Claude Code runs of the same prompt were listed as branches of each other. A conversation
that goes on under a new id (or that began before its agent sent one) still continues the
session that holds it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import pytest

from refold.store import Store
from refold.testing import ScriptedReply, serve

ProxyFactory = Callable[..., Any]
OPENING = {"role": "user", "content": "What did we do so far?"}


def turn(client: openai.OpenAI, history: list[dict[str, Any]], conversation: str | None,
         header: str) -> str:
    raw = client.chat.completions.with_raw_response.create(
        model="m", messages=history,  # type: ignore[arg-type]
        extra_headers={header: conversation} if conversation else None)
    history.append({"role": "assistant", "content": raw.parse().choices[0].message.content})
    return raw.headers["x-refold-session"]


@pytest.mark.parametrize("header", ["x-session-id", "X-Claude-Code-Session-Id", "session-id"])
def test_two_conversations_opening_alike_under_their_own_ids_are_two_families(
        start_proxy: ProxyFactory, sqlite_store: Store, header: str) -> None:
    with serve([f"reply {i}" for i in range(8)]) as up:
        client = openai.OpenAI(base_url=start_proxy(up).base_url, api_key="x",
                               max_retries=0)
        answered = {}
        for project in ("projA", "projB"):
            history = [dict(OPENING)]
            turn(client, history, f"ses_{project}", header)
            history.append({"role": "user", "content": f"now the tests of {project}"})
            answered[project] = turn(client, history, f"ses_{project}", header)
    sessions = sqlite_store.list_sessions()
    assert len(sessions) == 2
    assert all(s.parent_session_id is None for s in sessions), \
        [(s.title, s.link_kind) for s in sessions]  # neither is a branch of the other
    for project, session_id in answered.items():
        said = [str(r.message["content"]) for r in sqlite_store.get_messages(session_id)]
        assert said[2] == f"now the tests of {project}" and len(said) == 4


def test_a_conversation_goes_on_in_its_session_when_its_id_changes_or_first_appears(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    with serve([f"reply {i}" for i in range(8)]) as up:
        client = openai.OpenAI(base_url=start_proxy(up).base_url, api_key="x",
                               max_retries=0)
        history = [{"role": "user", "content": "fix the flaky test in ci.yml"}]
        first = turn(client, history, None, "x-session-id")  # before the agent sent an id
        for n, conversation in enumerate(("ses_1", "ses_1", "ses_2")):  # resumed: a new id
            history.append({"role": "user", "content": f"step {n}"})
            assert turn(client, history, conversation, "x-session-id") == first
    [session] = sqlite_store.list_sessions()
    said = [str(r.message["content"]) for r in sqlite_store.get_messages(session.id)]
    assert said == [str(m["content"]) for m in history]  # each message once
    assert sqlite_store.list_rewinds(session.id) == []


def test_without_an_id_two_conversations_alike_still_share_one_family(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    """(The documented rule when nothing tells them apart: one family, a branch each.)"""
    with serve([f"reply {i}" for i in range(4)]) as up:
        client = openai.OpenAI(base_url=start_proxy(up).base_url, api_key="x",
                               max_retries=0)
        for word in ("cats", "dogs"):
            history = [dict(OPENING)]
            turn(client, history, None, "x-session-id")
            history.append({"role": "user", "content": f"and {word}?"})
            turn(client, history, None, "x-session-id")
    kinds = sorted(str(s.link_kind) for s in sqlite_store.list_sessions())
    assert kinds == ["None", "branch"]


def test_an_agent_whose_id_changes_every_request_still_stores_each_message_once(
        start_pg_proxy: ProxyFactory, postgres_store: Store) -> None:
    with serve([f"reply {i}" for i in range(6)]) as up:
        client = openai.OpenAI(base_url=start_pg_proxy(up).base_url, api_key="x",
                               max_retries=0)
        history = [{"role": "system", "content": "be brief"},
                   {"role": "user", "content": "rename the billing module"}]
        answered = {turn(client, history, "id-0", "session-id")}
        for n in range(1, 5):
            history.append({"role": "user", "content": f"and step {n}"})
            answered.add(turn(client, history, f"id-{n}", "session-id"))
    [session] = postgres_store.list_sessions()
    assert answered == {session.id}
    said = [str(r.message["content"]) for r in postgres_store.get_messages(session.id)]
    assert said == [str(m["content"]) for m in history[1:]]


def test_a_tool_call_reply_re_spelled_by_the_agent_still_continues_its_session(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    """OpenCode re-sends a call's reply with ``content: ""`` and compact arguments: under a new
    id (``opencode run --session X --fork``) the conversation was stored again whole, as an
    unlinked session, and searches found its opening twice."""
    call = {"id": "call_1", "type": "function",
            "function": {"name": "read", "arguments": '{"filePath": "/p/notes.txt"}'}}
    with serve([ScriptedReply(content=None, tool_calls=[call]), "done", "again"]) as up:
        client = openai.OpenAI(base_url=start_proxy(up).base_url, api_key="x",
                               max_retries=0)
        history: list[dict[str, Any]] = [{"role": "user", "content": "read notes.txt"}]
        raw = client.chat.completions.with_raw_response.create(
            model="m", messages=history,  # type: ignore[arg-type]
            extra_headers={"x-session-id": "ses_a"})
        first = raw.headers["x-refold-session"]
        assert raw.parse().choices[0].message.tool_calls
        history += [{"role": "assistant", "content": "", "tool_calls": [
                        {**call, "function": {"name": "read",
                                              "arguments": '{"filePath":"/p/notes.txt"}'}}]},
                    {"role": "tool", "tool_call_id": "call_1", "content": "alpha-one"}]
        assert turn(client, history, "ses_a", "x-session-id") == first
        history.append({"role": "user", "content": "and the forked path"})
        assert turn(client, history, "ses_fork", "x-session-id") == first  # another id
    [session] = sqlite_store.list_sessions()
    assert len(sqlite_store.get_messages(session.id)) == len(history)  # each message once


def test_a_conversation_with_a_system_turn_after_its_opening_continues_under_a_new_id(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    """Claude Code sends its list of agent types as a system turn right after the opening:
    ``claude --resume ID --fork-session`` (a new id) stored the whole conversation again in an
    unlinked session each time, and a search found its opening three times."""
    with serve([f"reply {i}" for i in range(6)]) as up:
        client = openai.OpenAI(base_url=start_proxy(up).base_url, api_key="x",
                               max_retries=0)
        history: list[dict[str, Any]] = [
            {"role": "user", "content": "look at the zebra-quartz note"},
            {"role": "system", "content": "Available agent types: general-purpose, Explore"}]
        first = turn(client, history, "cc-1", "X-Claude-Code-Session-Id")
        history.append({"role": "user", "content": "and summarize it"})
        assert turn(client, history, "cc-1", "X-Claude-Code-Session-Id") == first
        history.append({"role": "user", "content": "now in the fork"})
        assert turn(client, history, "cc-fork", "X-Claude-Code-Session-Id") == first
    [session] = sqlite_store.list_sessions()
    assert len(sqlite_store.get_messages(session.id)) == len(history)  # each message once
