"""``system`` turns inside ``messages`` (the ``mid-conversation-system`` beta) reach an
Anthropic upstream in place, as the client sent them.

Claude Code 2.1 sends ``anthropic-beta: …,mid-conversation-system-2026-04-07,…`` and puts
``{"role": "system"}`` turns inside ``messages``: its agent and skills list right after the
first user turn, later reminders at the end ("The task tools haven't been used recently…").
refold folded each into the top-level ``system`` of the upstream request: every new reminder
changed the system prompt, so the provider's cache of the whole conversation was rebuilt,
and a reminder meant for one moment became a standing instruction. The anthropic SDK is the
client, ``refold serve`` runs on a socket, the upstream is the scripted Anthropic server.
"""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Callable
from typing import Any

import anthropic
import pytest

from refold.store import Store
from refold.testing import serve, serve_anthropic

ProxyFactory = Callable[..., Any]
MODEL = "claude-scripted"
BETA = "mid-conversation-system-2026-04-07"
HEADERS = {"anthropic-beta": f"claude-code-20250219,{BETA},effort-2025-11-24"}
EPHEMERAL = {"type": "ephemeral"}
SYSTEM = [{"type": "text", "text": "You are Claude Code.", "cache_control": EPHEMERAL},
          {"type": "text", "text": "Be concise.",
           "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
AGENTS = {"role": "system", "content": "Available agent types for the Agent tool:\n- general"}
REMINDER = {"role": "system", "content": [
    {"type": "text", "text": "The task tools haven't been used recently.",
     "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}


def sdk(root: str, headers: dict[str, str] | None = HEADERS) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=root, api_key="k", max_retries=0, timeout=30,
                               default_headers=headers or {})


def ask(client: anthropic.Anthropic, history: list[dict[str, Any]], stream: bool,
        **extra: Any) -> Any:
    """One turn (the SDK's types have no system turn: sent as Claude Code sends them)."""
    kwargs: dict[str, Any] = {"model": MODEL, "max_tokens": 100, "system": SYSTEM,
                              "messages": copy.deepcopy(history), **extra}
    if not stream:
        return client.messages.create(**kwargs)
    with client.messages.stream(**kwargs) as events:
        for _ in events:
            pass
        return events.get_final_message()


def marked(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text,
                                         "cache_control": EPHEMERAL}]}


def unmarked(turn: dict[str, Any]) -> dict[str, Any]:
    if isinstance(turn["content"], str) or turn["role"] == "system":
        return turn
    return dict(turn, content=[{k: v for k, v in b.items() if k != "cache_control"}
                               for b in turn["content"]])


def text_of(turn: dict[str, Any]) -> str:
    content = turn["content"]
    return content if isinstance(content, str) else "".join(
        str(b.get("text", "")) for b in content)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_system_turn_reaches_an_anthropic_upstream_in_place(
        start_proxy: ProxyFactory, sqlite_store: Store, stream: bool) -> None:
    with serve_anthropic(["Hello.", "Done."]) as up:
        proxy = start_proxy(up.base_url, upstream_format="anthropic")
        client = sdk(proxy.root)
        history: list[dict[str, Any]] = [marked("hello"), AGENTS]
        first = ask(client, history, stream)
        # Claude Code's second turn: the history re-sent, the breakpoint moved to the newest
        # user turn, a reminder (with a marker of its own) at the end
        history = [unmarked(t) for t in history] + [
            {"role": "assistant", "content": [b.model_dump(exclude_none=True)
                                              for b in first.content]},
            marked("go on"), REMINDER]
        ask(client, history, stream)
    one, two = up.llm.requests
    assert all(h.get("anthropic-beta") == HEADERS["anthropic-beta"] for h in up.llm.headers)
    # the top-level system as the client sent it, both times: nothing appended to it
    assert one["system"] == SYSTEM and two["system"] == SYSTEM
    assert one["messages"] == [marked("hello"), AGENTS]
    assert [t["role"] for t in two["messages"]] == [
        "user", "system", "assistant", "user", "system"]
    assert two["messages"][0] == {"role": "user", "content": "hello"}  # its marker moved on
    assert two["messages"][1] == AGENTS and two["messages"][4] == REMINDER
    assert text_of(two["messages"][2]) == "Hello."
    assert two["messages"][3] == marked("go on")
    sessions = sqlite_store.list_sessions()
    assert len(sessions) == 1, [s.title for s in sessions]
    rows = [r.message for r in sqlite_store.get_messages(sessions[0].id)]
    assert [(m["role"], m["content"]) for m in rows] == [
        ("user", "hello"), ("system", AGENTS["content"]), ("assistant", "Hello."),
        ("user", "go on"), ("system", "The task tools haven't been used recently."),
        ("assistant", "Done.")]


def test_the_beta_puts_a_system_turn_in_place_and_only_for_an_anthropic_upstream(
        start_proxy: ProxyFactory) -> None:
    """Without the beta (a client that never said it sends ``system`` turns so) the turn goes
    into ``system`` as before: an upstream that does not take the beta would refuse it in
    place. A chat upstream takes system messages anywhere: it gets it in place either way."""
    history = [{"role": "user", "content": "list the files"}, AGENTS]
    with serve_anthropic(["ok", "ok"]) as up, serve(["ok"]) as chat_up:
        proxy = start_proxy(up.base_url, upstream_format="anthropic")
        chat = start_proxy(chat_up)
        for client in (sdk(proxy.root), sdk(proxy.root, None), sdk(chat.root)):
            ask(client, history, stream=False)
    with_beta, without = up.llm.requests
    assert with_beta["system"] == SYSTEM and with_beta["messages"] == history
    assert without["messages"] == history[:1]
    assert without["system"] == [*SYSTEM, {"type": "text", "text": AGENTS["content"]}]
    assert chat_up.llm.requests[0]["messages"] == [
        {"role": "system", "content": "You are Claude Code.\n\nBe concise."},
        {"role": "user", "content": "list the files"},
        {"role": "system", "content": AGENTS["content"]}]


def test_markers_around_a_system_turn_in_place_stay_on_their_blocks(
        start_proxy: ProxyFactory) -> None:
    """The client's markers are counted among its user and assistant turns; a system turn in
    place between them moved none (one on a thinking block is a 400)."""
    signed = {"type": "thinking", "thinking": "Run it.", "signature": "sig-1"}
    bash = {"type": "tool_use", "id": "toolu_x1", "name": "Bash", "input": {"command": "ls"}}
    tools = [{"name": "Bash", "input_schema": {"type": "object"}}]
    with serve_anthropic(["Done."]) as up:
        proxy = start_proxy(up.base_url, upstream_format="anthropic")
        history = [
            {"role": "user", "content": "run it"}, AGENTS,
            {"role": "assistant", "content": [signed, bash]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x1",
                                          "content": "a.txt", "cache_control": EPHEMERAL}]},
            REMINDER]
        ask(sdk(proxy.root), history, stream=False, tools=tools)
    (sent,) = up.llm.requests
    assert sent["messages"] == history
    assert sent["system"] == SYSTEM


def valid_turns(messages: list[dict[str, Any]]) -> None:
    """What the Messages API requires of the turns: the first a user turn, user and assistant
    alternating (a system turn between them not counted), and a system turn only right after
    a user turn, followed by an assistant turn or last."""
    roles = [m["role"] for m in messages]
    assert roles[0] == "user", roles
    spoken = [r for r in roles if r != "system"]
    assert all(a != b for a, b in itertools.pairwise(spoken)), roles
    for i, role in enumerate(roles):
        if role == "system":
            assert roles[i - 1] == "user" and roles[i + 1:i + 2] in ([], ["assistant"]), roles


def test_a_compacted_conversation_keeps_its_system_turns_only_where_the_client_had_them(
        start_proxy: ProxyFactory) -> None:
    """A compaction moves the system turns of what it summarizes up to the system prompt;
    those the client sends after it go in place, and the system prompt no longer changes with
    each of them (the cache of the compacted conversation stays)."""
    compacted: list[int] = []
    sent: list[list[dict[str, Any]]] = []
    with serve_anthropic([f"Answer {n}." for n in range(30)]) as up:
        proxy = start_proxy(up.base_url, upstream_format="anthropic", context_length=3000)
        client = sdk(proxy.root)
        history: list[dict[str, Any]] = [{"role": "user", "content": "Question 0."}, AGENTS]
        for n in range(30):
            if n == 3 or (compacted and n - compacted[0] in (1, 3)):
                history.append({"role": "system", "content": f"Reminder {n}: tasks unused."})
            sent.append(copy.deepcopy(history))
            raw = client.messages.with_raw_response.create(
                model=MODEL, max_tokens=100, system=SYSTEM,  # type: ignore[arg-type]
                messages=copy.deepcopy(history))  # type: ignore[arg-type]
            if raw.headers.get("x-refold-compacted"):
                compacted.append(n)
            if compacted and n - compacted[0] == 4:
                break
            history += [{"role": "assistant", "content": [b.model_dump(exclude_none=True)
                                                          for b in raw.parse().content]},
                        {"role": "user", "content": f"Question {n + 1}: " + (
                            "" if compacted else "detail " * 250)}]
    assert len(compacted) == 1, compacted  # one compaction, then short turns
    for request, client_turns in zip(up.llm.requests, sent, strict=True):
        turns = request["messages"]
        valid_turns(turns)
        # each system turn in place is the client's at the same place, counted from the end
        for back in range(1, len(turns) + 1):
            if turns[-back]["role"] == "system":
                assert turns[-back] == client_turns[-back]
        in_place = {text_of(t) for t in turns if t["role"] == "system"}
        assert not any(text in json.dumps(request["system"]) for text in in_place)
    last, after = up.llm.requests[-1], compacted[0] + 1
    assert [text_of(t) for t in last["messages"] if t["role"] == "system"] == [
        f"Reminder {after}: tasks unused.", f"Reminder {after + 2}: tasks unused."]
    assert "Reminder 3" in json.dumps(last["system"])  # compacted: moved up, as before
    assert [r["system"] for r in up.llm.requests[after - 1:]] == [last["system"]] * 5
