"""``/v1/responses``: a ``previous_response_id`` chain stays in its lineage whatever its
``instructions``, each message stored once.

A request without ``X-Refold-Session`` was placed by its opening (system message + first user
message), and ``instructions`` are per request: a chain whose instructions changed or were left
out was split across unrelated root sessions, each storing the chain again (r1 and r2 "Be
terse.", r3 without, r4 "Now be verbose.": three roots, the first question stored three times).
Now the instructions still go upstream as that request's system prompt, and a changed one is
recorded as the runtime records any changed system prompt: a ``system_prompt`` event.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import pytest

from refold.store import Store
from refold.testing import serve

ProxyFactory = Callable[..., Any]
MODEL = "scripted-model"


def sdk(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="none", max_retries=0, timeout=30)


def respond(client: openai.OpenAI, stream: bool, **fields: Any) -> Any:
    if not stream:
        return client.responses.create(model=MODEL, **fields)
    with client.responses.stream(model=MODEL, **fields) as events:
        for _ in events:
            pass
        return events.get_final_response()


def chain(store: Store, session_id: str) -> list[tuple[str, str]]:
    return [(r.role, str(r.message.get("content"))) for r in store.get_messages(session_id)]


def systems(request: dict[str, Any]) -> list[str]:
    return [str(m["content"]) for m in request["messages"] if m["role"] == "system"]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_changed_or_missing_instructions_keep_the_chain_in_one_session(
        start_proxy: ProxyFactory, sqlite_store: Store, stream: bool) -> None:
    with serve(default=lambda body: f"reply {len(body['messages'])}") as up:
        client = sdk(start_proxy(up).base_url)
        r1 = respond(client, stream, instructions="Be terse.", input="What is the codeword?")
        r2 = respond(client, stream, instructions="Be terse.", previous_response_id=r1.id,
                     input="Second question")
        r3 = respond(client, stream, previous_response_id=r2.id, input="Third question")
        r4 = respond(client, stream, instructions="Now be verbose.",
                     previous_response_id=r3.id, input="Fourth question")
        assert client.responses.retrieve(r4.id).output_text == r4.output_text
    sessions = sqlite_store.list_sessions()
    assert len(sessions) == 1, [(s.title, s.parent_session_id) for s in sessions]
    sid = sessions[0].id
    assert {r.id.split("_")[1] for r in (r1, r2, r3, r4)} == {sid}
    replies = [r.output_text for r in (r1, r2, r3, r4)]
    assert chain(sqlite_store, sid) == [
        ("user", "What is the codeword?"), ("assistant", replies[0]),
        ("user", "Second question"), ("assistant", replies[1]),
        ("user", "Third question"), ("assistant", replies[2]),
        ("user", "Fourth question"), ("assistant", replies[3])]
    # per request upstream: each request's own instructions, none for r3
    assert [systems(r) for r in up.llm.requests] == [
        ["Be terse."], ["Be terse."], [], ["Now be verbose."]]
    # the changed system prompt is recorded as the runtime records one
    assert [e.payload["text"] for e in sqlite_store.list_events(sid, "system_prompt")] == [
        "Be terse.", "Now be verbose."]


@pytest.mark.parametrize("other", ["Other.", "I"], ids=["changed", "same"])
def test_a_fork_is_a_branch_of_the_same_lineage(
        start_proxy: ProxyFactory, sqlite_store: Store, other: str) -> None:
    """Two continuations of one response still fork (the existing branch placement: "same"
    passed before the fix too), also when the second one changes the instructions; the
    fork's own continuation stays on it."""
    with serve(default=lambda body: f"reply {len(body['messages'])}") as up:
        client = sdk(start_proxy(up).base_url)
        r1 = respond(client, False, instructions="I", input="one")
        r2 = respond(client, False, instructions="I", previous_response_id=r1.id, input="two")
        fork = respond(client, False, instructions=other, previous_response_id=r1.id,
                       input="fork from one")
        after = respond(client, False, instructions=other, previous_response_id=fork.id,
                        input="fork goes on")
        main = respond(client, False, instructions="I", previous_response_id=r2.id,
                       input="three")
    sessions = {s.id: s for s in sqlite_store.list_sessions()}
    assert len(sessions) == 2, [(s.title, s.parent_session_id) for s in sessions.values()]
    root = r1.id.split("_")[1]
    branch = fork.id.split("_")[1]
    assert {r2.id.split("_")[1], main.id.split("_")[1]} == {root}
    assert after.id.split("_")[1] == branch != root
    assert sessions[branch].parent_session_id == root
    assert sessions[branch].link_kind == "branch"
    assert chain(sqlite_store, root) == [
        ("user", "one"), ("assistant", r1.output_text), ("user", "two"),
        ("assistant", r2.output_text), ("user", "three"), ("assistant", main.output_text)]
    assert chain(sqlite_store, branch) == [
        ("user", "one"), ("assistant", r1.output_text), ("user", "fork from one"),
        ("assistant", fork.output_text), ("user", "fork goes on"),
        ("assistant", after.output_text)]
    assert [systems(r) for r in up.llm.requests] == [["I"], ["I"], [other], [other], ["I"]]
    assert [e.payload["text"] for e in sqlite_store.list_events(branch, "system_prompt")
            ][-1] == other


def test_a_chain_begun_under_a_session_name_continues_in_it(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    """The lineage's name is its first session's title: a chain begun with
    ``X-Refold-Session`` continues there when later requests leave the header out."""
    with serve(default=lambda body: f"reply {len(body['messages'])}") as up:
        client = sdk(start_proxy(up).base_url)
        r1 = client.responses.create(model=MODEL, instructions="I", input="one",
                                     extra_headers={"X-Refold-Session": "agent 7"})
        r2 = respond(client, False, previous_response_id=r1.id, input="two")
    sessions = sqlite_store.list_sessions()
    assert [s.title for s in sessions] == ["agent 7"]
    assert chain(sqlite_store, sessions[0].id) == [
        ("user", "one"), ("assistant", r1.output_text), ("user", "two"),
        ("assistant", r2.output_text)]
