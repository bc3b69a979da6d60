"""Anthropic blocks the chat form has no place for, through ``/v1/messages``: kept beside the
stored chat message (``refold.messages.anthropic.KEPT``) and sent back as the client sent them
to an Anthropic upstream; an OpenAI-compatible upstream reads them as text."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import httpx
import pytest

from refold.store import Store
from refold.testing import AnthropicReply, serve, serve_anthropic

ProxyFactory = Callable[..., Any]
MODEL = "claude-scripted"
WEB_SEARCH = {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}
SEARCHED = [
    {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
     "input": {"query": "refold context engine"}},
    {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": [
        {"type": "web_search_result", "url": "https://example.org/refold", "title": "Refold",
         "encrypted_content": "EC1", "page_age": "2 days ago"}]},
    {"type": "text", "text": "Refold is a context engine.", "citations": [
        {"type": "web_search_result_location", "url": "https://example.org/refold",
         "title": "Refold", "encrypted_index": "EI1", "cited_text": "a context engine"}]}]


def one_session(store: Store) -> list[dict[str, Any]]:
    sessions = store.list_sessions()
    assert len(sessions) == 1, [s.title for s in sessions]
    return [r.message for r in store.get_messages(sessions[0].id)]


def test_a_web_search_turn_goes_back_verbatim_to_an_anthropic_upstream(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    """Claude Code's WebSearch is a server tool: its reply holds ``server_tool_use``,
    ``web_search_tool_result`` and text with ``citations``. Every follow-up turn re-sends them;
    refold refused that with a 400 ("block type 'server_tool_use' has no OpenAI
    equivalent"). Now they reach the upstream as sent, in place, and the conversation stays
    one session."""
    with serve_anthropic([AnthropicReply(content=SEARCHED), "Glad to help.", "Bye."]) as up:
        proxy = start_proxy(up.base_url, upstream_format="anthropic")
        sdk = anthropic.Anthropic(base_url=proxy.root, api_key="k", max_retries=0, timeout=30)
        history: list[dict[str, Any]] = [{"role": "user", "content": "what is refold?"}]
        for follow_up in ("thanks", "bye"):
            reply = sdk.messages.create(model=MODEL, max_tokens=100, messages=history,  # type: ignore[arg-type]
                                        tools=[WEB_SEARCH])  # type: ignore[list-item]
            history += [{"role": "assistant", "content": [b.model_dump(exclude_none=True)
                                                          for b in reply.content]},
                        {"role": "user", "content": follow_up}]
        sdk.messages.create(model=MODEL, max_tokens=100, messages=history,  # type: ignore[arg-type]
                            tools=[WEB_SEARCH])  # type: ignore[list-item]
    assert history[1]["content"] == SEARCHED  # what the client got, and re-sent
    for request in up.llm.requests[1:]:
        assert request["messages"][1] == {"role": "assistant", "content": SEARCHED}
    rows = one_session(sqlite_store)
    assert [m["role"] for m in rows] == ["user", "assistant", "user", "assistant", "user",
                                         "assistant"]
    assert "https://example.org/refold" in str(rows[1]["content"])  # readable in the ledger


def test_a_web_search_turn_reaches_an_openai_upstream_as_text(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    with serve(["Glad to help."]) as up:
        proxy = start_proxy(up)
        response = httpx.post(proxy.root + "/v1/messages", timeout=30, json={
            "model": MODEL, "max_tokens": 100, "tools": [WEB_SEARCH], "messages": [
                {"role": "user", "content": "what is refold?"},
                {"role": "assistant", "content": SEARCHED},
                {"role": "user", "content": "thanks"}]})
        assert response.status_code == 200, response.text
    sent = up.llm.requests[0]["messages"][1]
    assert sent["role"] == "assistant" and set(sent) == {"role", "content"}
    text = "\n".join(p["text"] for p in sent["content"])
    assert "refold context engine" in text  # the query
    assert "Refold <https://example.org/refold>" in text  # each result's title and URL
    assert "Refold is a context engine." in text
    assert "EC1" not in str(up.llm.requests[0])  # no encrypted blobs for a chat model
    one_session(sqlite_store)


PNG = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                   "data": "iVBORw0KGgo="}}
PDF = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf",
                                      "data": "JVBERi0xLjQK"}}
RESULTS = [
    {"type": "tool_result", "tool_use_id": "toolu_e1", "is_error": True,
     "content": "Exit code 1"},
    {"type": "tool_result", "tool_use_id": "toolu_e2", "content": [PDF]},
    {"type": "tool_result", "tool_use_id": "toolu_e3", "content": [
        {"type": "text", "text": "image read"}, PNG]}]
CALLS = [{"type": "tool_use", "id": f"toolu_e{n}", "name": "Bash", "input": {"command": c}}
         for n, c in ((1, "false"), (2, "cat a.pdf"), (3, "cat a.png"))]


def tool_turns(follow_ups: int) -> list[list[dict[str, Any]]]:
    """Claude Code's requests: a failed command, a PDF and an image read by tools."""
    history: list[dict[str, Any]] = [{"role": "user", "content": "run them"},
                                     {"role": "assistant", "content": CALLS},
                                     {"role": "user", "content": RESULTS}]
    requests = [list(history)]
    for n in range(follow_ups):
        history += [{"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
                    {"role": "user", "content": f"next {n}"}]
        requests.append(list(history))
    return requests


def test_tool_results_reach_an_anthropic_upstream_as_the_client_sent_them(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    """``is_error`` was dropped (a failed command read as a success), a PDF became the text
    ``[image]`` and ``[text, image]`` the text ``image read\\n[image]``. Now the upstream gets
    each ``tool_result`` block as sent, turn after turn, and the conversation is one session."""
    with serve_anthropic(["ok", "ok", "ok"]) as up:
        proxy = start_proxy(up.base_url, upstream_format="anthropic")
        for messages in tool_turns(2):
            response = httpx.post(proxy.root + "/v1/messages", timeout=30, json={
                "model": MODEL, "max_tokens": 100, "messages": messages})
            assert response.status_code == 200, response.text
    for request in up.llm.requests:
        assert request["messages"][2] == {"role": "user", "content": RESULTS}
    rows = one_session(sqlite_store)
    assert [m["role"] for m in rows] == ["user", "assistant", "tool", "tool", "tool",
                                         "assistant", "user", "assistant", "user", "assistant"]
    assert [m["content"] for m in rows[2:5]] == [
        "Exit code 1", "[document: application/pdf]", "image read\n[image]"]


def test_tool_results_reach_an_openai_upstream_with_the_error_and_the_image(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    with serve(["ok", "ok"]) as up:
        proxy = start_proxy(up)
        for messages in tool_turns(1):
            response = httpx.post(proxy.root + "/v1/messages", timeout=30, json={
                "model": MODEL, "max_tokens": 100, "messages": messages})
            assert response.status_code == 200, response.text
    for request in up.llm.requests:
        sent = request["messages"]
        assert [m["role"] for m in sent[:6]] == ["user", "assistant", "tool", "tool", "tool",
                                                 "user"]
        assert [m["content"] for m in sent[2:5]] == [
            "[error] Exit code 1", "[document: application/pdf]", "image read\n[image]"]
        assert sent[5]["content"][1] == {"type": "image_url", "image_url": {
            "url": "data:image/png;base64,iVBORw0KGgo="}}
        assert "anthropic_blocks" not in str(request)
    assert len(up.llm.requests[1]["messages"]) == 8  # the images' message is not stored
    rows = one_session(sqlite_store)
    assert [m["role"] for m in rows] == ["user", "assistant", "tool", "tool", "tool",
                                         "assistant", "user", "assistant"]


INTERLEAVED = [
    {"type": "thinking", "thinking": "two checks", "signature": "SIGX" + "Q" * 30},
    {"type": "text", "text": "First I'll check the tests."},
    {"type": "tool_use", "id": "toolu_a", "name": "Bash", "input": {"command": "pytest"}},
    {"type": "text", "text": "And the lint."},
    {"type": "tool_use", "id": "toolu_b", "name": "Bash", "input": {"command": "ruff ."}}]


# the client re-sends the blocks in its own spelling: its SDK leaves out the None values
SPELLED = [SEARCHED[0], {**SEARCHED[1], "content": [{**SEARCHED[1]["content"][0],
                                                     "page_age": None}]}, SEARCHED[2]]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("named", [False, True], ids=["derived", "named"])
@pytest.mark.parametrize("content", [INTERLEAVED, SEARCHED, SPELLED],
                         ids=["interleaved", "search", "respelled"])
def test_a_reply_of_several_blocks_is_recorded_as_the_client_re_sends_it(
        start_proxy: ProxyFactory, sqlite_store: Store, stream: bool, named: bool,
        content: list[dict[str, Any]]) -> None:
    """A streamed reply whose text a ``tool_use`` splits was recorded with its text blocks
    glued ("…tests.And the lint."), so the next turn, re-sending two text blocks, diverged from
    the ledger: a branch (a rewind under ``X-Refold-Session``) every such turn. The upstream
    also got the blocks reordered, calls after all text. Now the stream is recorded from the
    upstream's own blocks as a JSON reply is, and the blocks go back in their order."""
    with serve_anthropic([AnthropicReply(content=content), "all good", "bye"]) as up:
        proxy = start_proxy(up.base_url, upstream_format="anthropic")
        headers = {"X-Refold-Session": "cc-1"} if named else {}
        sdk = anthropic.Anthropic(base_url=proxy.root, api_key="k", max_retries=0, timeout=30,
                                  default_headers=headers)
        history: list[dict[str, Any]] = [{"role": "user", "content": "check the repo"}]
        for _ in range(3):
            kwargs: dict[str, Any] = {"model": MODEL, "max_tokens": 500, "messages": history,
                                      "tools": [WEB_SEARCH]}
            if stream:
                with sdk.messages.stream(**kwargs) as events:
                    reply = events.get_final_message()
            else:
                reply = sdk.messages.create(**kwargs)
            history += [{"role": "assistant", "content": [b.model_dump(exclude_none=True)
                                                          for b in reply.content]}]
            calls = [b.id for b in reply.content if b.type == "tool_use"]
            history.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": c, "content": "ok"} for c in calls]
                or "thanks"})
    resent = history[1]["content"]
    assert resent == content or content is SPELLED
    for request in up.llm.requests[1:]:
        assert request["messages"][1] == {"role": "assistant", "content": resent}
    rows = one_session(sqlite_store)  # one session, each message once: no branch
    assert len(rows) == 5 + max(1, sum(b["type"] == "tool_use" for b in content))
    texts = [b["text"] for b in content if b["type"] == "text"]
    assert [p["text"] for p in rows[1]["content"]][-len(texts):] == texts  # not glued
    assert sqlite_store.list_rewinds(sqlite_store.list_sessions()[0].id) == []
