"""An agent's side calls and its conversation after its own compaction, linked by the
conversation id it sends with every request (``refold.server.agents``).

OpenCode through ``refold serve`` (the real CLI, 1.18): each conversation's title call — the
same ``x-session-id``, no tools, "Generate a title for this conversation:" and the user's prompt
— was a session of its own, half of ``sessions list`` after a few runs, and a search found the
prompt twice, the title call's copy first; after OpenCode's own compaction the conversation went
on from "What did we do so far?" as one more unlinked session. Claude Code's title call and its
conversation after ``/compact`` were the same."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import pytest

from refold.store import SearchQuery, Store
from refold.testing import serve

ProxyFactory = Callable[..., Any]
PROMPT = "Please read notes.txt and tell me the codeword alpha-one"
TOOLS = [{"type": "function", "function": {"name": "read", "parameters": {
    "type": "object", "properties": {"filePath": {"type": "string"}}}}}]


def _ask(client: openai.OpenAI, messages: list[dict[str, Any]], agent: str,
         tools: bool) -> str:
    """The session the turn went to (its reply appended to ``messages``)."""
    raw = client.chat.completions.with_raw_response.create(
        model="m", messages=messages,  # type: ignore[arg-type]
        tools=TOOLS if tools else openai.NOT_GIVEN,  # type: ignore[arg-type]
        extra_headers={"x-session-id": agent})
    messages.append({"role": "assistant", "content": raw.parse().choices[0].message.content})
    return raw.headers["x-refold-session"]


def _flow(start: ProxyFactory, store: Store) -> None:
    with serve([f"reply {i}" for i in range(10)]) as up:
        client = openai.OpenAI(base_url=start(up).base_url, api_key="x", max_retries=0)
        # the title call goes first (the agent sends both at once)
        title = _ask(client, [{"role": "system", "content": "You are a title generator."},
                              {"role": "user", "content": "Generate a title for this "
                                                          "conversation:"},
                              {"role": "user", "content": PROMPT}], "ses_1", tools=False)
        history: list[dict[str, Any]] = [{"role": "system", "content": "You are opencode."},
                                         {"role": "user", "content": PROMPT}]
        main = _ask(client, history, "ses_1", tools=True)
        history.append({"role": "user", "content": "and the next file"})
        assert _ask(client, history, "ses_1", tools=True) == main  # the conversation itself
        after = _ask(client, [{"role": "system", "content": "You are opencode."},
                              {"role": "user", "content": "What did we do so far?"},
                              {"role": "assistant", "content": "We read notes.txt."},
                              {"role": "user", "content": "go on"}], "ses_1", tools=True)
        summary = _ask(client, [{"role": "user", "content": "Summarize: " + PROMPT}],
                       "ses_1", tools=False)
        other = _ask(client, [{"role": "user", "content": "an unrelated task"}], "ses_2",
                     tools=True)
        history.append({"role": "user", "content": "one more"})
        assert _ask(client, history, "ses_1", tools=True) == main  # still its own session
    ids = {s.id: s for s in store.list_sessions()}  # (the header names a session by its id)
    main_id = main
    assert (ids[title].parent_session_id, ids[title].link_kind) == (main_id, "side")
    assert (ids[after].parent_session_id, ids[after].link_kind) == (main_id, "continuation")
    assert (ids[summary].parent_session_id, ids[summary].link_kind) == (ids[after].id, "side")
    assert ids[main].parent_session_id is None and ids[other].parent_session_id is None
    assert len(ids) == 5
    assert store.resolve_resume(main_id).id == main_id  # its turns never go elsewhere
    hits = store.search(SearchQuery(PROMPT, limit=10))
    said = [h for h in hits if h.content == PROMPT]
    assert len(said) == 1 and set(said[0].lineage) == {main_id, ids[title].id}, \
        [(h.session_id, h.lineage) for h in said]
    assert said[0].session_id == main_id


def test_side_calls_and_the_conversation_after_compaction_link_to_it(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    _flow(start_proxy, sqlite_store)


@pytest.mark.postgres
def test_side_calls_link_on_postgres(start_pg_proxy: ProxyFactory,
                                     postgres_store: Store) -> None:
    _flow(start_pg_proxy, postgres_store)


def test_a_title_call_after_the_conversation_shows_as_the_conversation_in_search(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    """The newer copy ranked first on a tie (the same text, the same score): the prompt's hit
    was the title call's, its context the title."""
    with serve(["reply", "A title"]) as up:
        client = openai.OpenAI(base_url=start_proxy(up).base_url, api_key="x", max_retries=0)
        main = _ask(client, [{"role": "user", "content": PROMPT}], "ses_9", tools=True)
        title = _ask(client, [{"role": "user", "content": "Generate a title for this "
                                                          "conversation:"},
                              {"role": "user", "content": PROMPT}], "ses_9", tools=False)
    assert sqlite_store.get_session(title).parent_session_id == main
    [hit] = [h for h in sqlite_store.search(SearchQuery(PROMPT, limit=10))
             if h.content == PROMPT]
    assert hit.session_id == main and set(hit.lineage) == {main, title}


def test_a_subagent_s_conversation_is_one_of_the_conversation_s(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    """Claude Code's subagent (its Agent tool) sends the conversation's id and its own agent
    id: its conversation is a ``subagent`` of the conversation, not the continuation a later
    side call would link to."""
    def ask(client: openai.OpenAI, messages: list[dict[str, Any]], tools: bool,
            subagent: str | None = None) -> str:
        headers = {"X-Claude-Code-Session-Id": "cc-1"}
        if subagent:
            headers["x-claude-code-agent-id"] = subagent
        raw = client.chat.completions.with_raw_response.create(
            model="m", messages=messages,  # type: ignore[arg-type]
            tools=TOOLS if tools else openai.NOT_GIVEN,  # type: ignore[arg-type]
            extra_headers=headers)
        return raw.headers["x-refold-session"]

    with serve(["reply"] * 4) as up:
        client = openai.OpenAI(base_url=start_proxy(up).base_url, api_key="x", max_retries=0)
        main = ask(client, [{"role": "user", "content": "review the parser"}], tools=True)
        sub = ask(client, [{"role": "user", "content": "List the files under src/"}],
                  tools=True, subagent="agent-7")
        title = ask(client, [{"role": "user", "content": "<session>review the parser</session>"
                                                         " Write the title"}], tools=False)
    assert (sqlite_store.get_session(sub).parent_session_id,
            sqlite_store.get_session(sub).link_kind) == (main, "subagent")
    assert sqlite_store.get_session(title).parent_session_id == main  # not the subagent's
    assert sqlite_store.resolve_resume(main).id == main


def test_a_title_call_that_wraps_the_prompt_is_no_hit_beside_its_conversation(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    """Claude Code's title call sends ``<session>PROMPT</session>`` and its instruction, the
    conversation's first message a reminder and the prompt: no copy to fold, and a search
    found the prompt twice, the title call's first."""
    prompt = "Please look around this project and tell me about the zebra-quartz note"
    with serve(["reply", '{"title": "Zebra-quartz note"}']) as up:
        client = openai.OpenAI(base_url=start_proxy(up).base_url, api_key="x", max_retries=0)
        main = _ask(client, [{"role": "user", "content": "<system-reminder>Be brief."
                                                         "</system-reminder>\n" + prompt}],
                    "cc-2", tools=True)
        title = _ask(client, [{"role": "user", "content": f"<session>\n{prompt}\n</session>"
                                                          "\n\nWrite the title"}],
                     "cc-2", tools=False)
        lone = _ask(client, [{"role": "user", "content": "<session>\nzebra-quartz alone\n"
                                                         "</session>\n\nWrite the title"}],
                    "cc-3", tools=False)  # a side call with no conversation: still found
    hits = sqlite_store.search(SearchQuery(prompt, limit=10))
    assert [h.session_id for h in hits if "zebra-quartz note" in h.content] == [main]
    assert title not in {h.session_id for h in hits}
    assert lone in {h.session_id for h in sqlite_store.search(SearchQuery("zebra-quartz"))}
