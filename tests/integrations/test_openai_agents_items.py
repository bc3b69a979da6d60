"""``RefoldSession``: which refold session a name opens, and which items come back as they were
added — under the real openai-agents ``Runner`` (a chat-completions model against refold's
scripted server, a Responses model against a small scripted ``/v1/responses`` server) and
through ``add_items``/``get_items`` directly; both store backends."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from agents import Agent, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner, WebSearchTool
from agents.memory.session_settings import SessionSettings
from agents.run import RunConfig
from openai import AsyncOpenAI

from refold.errors import InvalidInput, NotFound
from refold.integrations.openai_agents import RefoldSession
from refold.messages.model import TOOL_IMAGES_NOTE
from refold.messages.responses import KEPT, input_messages, to_items
from refold.runtime.engine import Engine
from refold.store import Store
from refold.testing import RunningLLM, ScriptedReply, serve

CONFIG = RunConfig(tracing_disabled=True)
PNG = "data:image/png;base64,iVBORw0KGgo="
PDF = "data:application/pdf;base64," + base64.b64encode(b"%PDF-1.4 hello").decode()


def chat_agent(up: RunningLLM) -> Agent:
    client = AsyncOpenAI(base_url=up.base_url, api_key="none", max_retries=0)
    return Agent(name="helper", instructions="Be brief.",
                 model=OpenAIChatCompletionsModel(model="scripted-model", openai_client=client))


def round_trip(session: RefoldSession, items: list[Any]) -> list[Any]:
    async def both() -> list[Any]:
        await session.add_items(items)
        return await session.get_items()

    return asyncio.run(both())


def ledger(store: Store, title: str) -> list[dict[str, Any]]:
    (session,) = [s for s in store.list_sessions() if s.title == title]
    return [r.message for r in store.get_messages(session.id)]


# -- which session a name opens --------------------------------------------------------------

def test_a_name_that_is_a_prefix_of_another_sessions_id_opens_its_own_session(
        engine: Engine, store: Store) -> None:
    """A name is an exact id or title: a short name that happens to begin another session's id
    opened that session (its items read, the new ones stored into it)."""
    alice = RefoldSession("alice-support-chat", engine)
    asyncio.run(alice.add_items([{"role": "user", "content": "order #991"},
                                 {"role": "assistant", "content": "Thanks Alice."}]))
    alice_id = alice.runtime().session_id
    bob = RefoldSession(alice_id[:2], engine)

    async def bobs() -> list[Any]:
        seen = await bob.get_items()
        await bob.add_items([{"role": "user", "content": "Hi, I'm Bob."}])
        return seen

    assert asyncio.run(bobs()) == []
    assert bob.runtime().session_id != alice_id
    assert [m["content"] for m in ledger(store, "alice-support-chat")] == [
        "order #991", "Thanks Alice."]
    assert [m["content"] for m in ledger(store, alice_id[:2])] == ["Hi, I'm Bob."]
    # the whole id is still a name for it
    assert RefoldSession(alice_id, engine).runtime().session_id == alice_id


def test_first_use_of_a_new_name_that_another_session_object_just_created(
        engine: Engine, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two RefoldSession objects (two requests of one new conversation) use a new name at once:
    the loser's create found the title taken (Conflict) and its add_items raised, its items
    lost. Made deterministic: the other creates the session between the lookup and the create."""
    resolve = store.resolve_session
    raced: list[str] = []

    def racing(ref: str, **kw: Any) -> Any:
        if not raced:
            raced.append(ref)
            asyncio.run(RefoldSession(ref, engine).add_items(
                [{"role": "user", "content": "from the other request"}]))
            raise NotFound(f"no session with the id or title {ref!r}")
        return resolve(ref, **kw)

    monkeypatch.setattr(store, "resolve_session", racing)
    asyncio.run(RefoldSession("shared-chat", engine).add_items(
        [{"role": "user", "content": "from this request"}]))
    assert raced == ["shared-chat"]
    assert [m["content"] for m in ledger(store, "shared-chat")] == [
        "from the other request", "from this request"]


def test_many_threads_first_use_one_new_name(engine: Engine, store: Store) -> None:
    barrier = threading.Barrier(6)
    errors: list[BaseException] = []

    def one(n: int) -> None:
        session = RefoldSession("busy-chat", engine)
        barrier.wait()
        try:
            asyncio.run(session.add_items([{"role": "user", "content": f"from thread {n}"}]))
        except BaseException as exc:  # collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(m["content"] for m in ledger(store, "busy-chat")) == [
        f"from thread {n}" for n in range(6)]


# -- hosted tools (items with no chat form) --------------------------------------------------

class ScriptedResponses:
    """A tiny ``/v1/responses`` server: each POST answers the next scripted output list."""

    def __init__(self, outputs: list[list[dict[str, Any]]]) -> None:
        self.outputs = list(outputs)
        self.requests: list[dict[str, Any]] = []
        scripted = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                scripted.requests.append(body)
                data = json.dumps(scripted.response(body)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def response(self, body: dict[str, Any]) -> dict[str, Any]:
        usage = {"input_tokens": 5, "output_tokens": 5, "total_tokens": 10,
                 "input_tokens_details": {"cached_tokens": 0},
                 "output_tokens_details": {"reasoning_tokens": 0}}
        return {"id": f"resp_{len(self.requests)}", "object": "response",
                "created_at": int(time.time()), "model": body["model"], "status": "completed",
                "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
                "output": self.outputs.pop(0), "usage": usage}


@pytest.fixture
def responses_server() -> Iterator[ScriptedResponses]:
    search = {"id": "ws_1", "type": "web_search_call", "status": "completed",
              "action": {"type": "search", "query": "refold release"}}
    answer = {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
              "content": [{"type": "output_text", "text": "Refold 1.0 shipped today.",
                           "annotations": []}]}
    again = {"id": "msg_2", "type": "message", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": "Today.", "annotations": []}]}
    outputs: list[list[dict[str, Any]]] = [[search, answer], [again]]
    scripted = ScriptedResponses(outputs)
    thread = threading.Thread(target=scripted.server.serve_forever, daemon=True)
    thread.start()
    yield scripted
    scripted.server.shutdown()
    scripted.server.server_close()


def test_a_run_with_a_hosted_tool_is_stored_and_its_call_comes_back(
        engine: Engine, store: Store, responses_server: ScriptedResponses) -> None:
    """A Responses model's web_search_call made add_items raise InvalidInput after the model
    answered (Runner.run raised, the answer was lost). It is kept verbatim and given back."""
    client = AsyncOpenAI(base_url=responses_server.base_url, api_key="none", max_retries=0)
    agent = Agent(name="helper", instructions="Be brief.", tools=[WebSearchTool()],
                  model=OpenAIResponsesModel(model="gpt-4.1", openai_client=client))
    session = RefoldSession("news", engine)

    async def runs() -> tuple[Any, Any, list[Any]]:
        first = await Runner.run(agent, "Any refold news?", session=session, run_config=CONFIG)
        second = await Runner.run(agent, "When?", session=session, run_config=CONFIG)
        return first, second, await session.get_items()

    first, second, items = asyncio.run(runs())
    assert first.final_output == "Refold 1.0 shipped today." and second.final_output == "Today."
    search = {"id": "ws_1", "type": "web_search_call", "status": "completed",
              "action": {"type": "search", "query": "refold release"}}
    assert items[:3] == [
        {"role": "user", "content": "Any refold news?"}, search,
        {"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": "Refold 1.0 shipped today.", "annotations": []}]}]
    # the second model call got it back, in its place
    sent = responses_server.requests[1]["input"]
    assert [i.get("type") for i in sent] == [None, "web_search_call", "message", None]
    assert sent[1]["id"] == "ws_1"
    # in the ledger: the answer's chat form, the call kept beside it (not as content or a call)
    stored = ledger(store, "news")
    assert stored[1] == {"role": "assistant", "content": "Refold 1.0 shipped today.",
                         KEPT: {"before": [search]}}


HOSTED: dict[str, list[dict[str, Any]]] = {
    "web_search_call": [{"role": "user", "content": "q"},
                        {"id": "ws_1", "type": "web_search_call", "status": "completed",
                         "action": {"type": "search", "query": "x"}}],
    "file_search_call": [{"role": "user", "content": "q"},
                         {"id": "fs_1", "type": "file_search_call", "status": "completed",
                          "queries": ["x"], "results": None},
                         {"type": "message", "role": "assistant", "content": [
                             {"type": "output_text", "text": "found", "annotations": []}]}],
    "computer_call": [{"role": "user", "content": "q"},
                      {"id": "cu_1", "type": "computer_call", "call_id": "cc1",
                       "action": {"type": "screenshot"}, "pending_safety_checks": [],
                       "status": "completed"},
                      {"type": "computer_call_output", "call_id": "cc1",
                       "output": {"type": "computer_screenshot", "image_url": PNG}}],
    "mcp_list_tools": [{"role": "user", "content": "q"},
                       {"id": "ml_1", "type": "mcp_list_tools", "server_label": "s",
                        "tools": []},
                       {"type": "function_call", "call_id": "c1", "name": "f",
                        "arguments": "{}"},
                       {"type": "function_call_output", "call_id": "c1", "output": "r"}],
    "item_reference alone": [{"type": "item_reference", "id": "msg_abc"}],
    "between text and calls": [{"role": "user", "content": "q"},
                               {"type": "message", "role": "assistant", "content": [
                                   {"type": "output_text", "text": "looking",
                                    "annotations": []}]},
                               {"id": "ws_2", "type": "web_search_call",
                                "status": "completed",
                                "action": {"type": "search", "query": "y"}},
                               {"type": "function_call", "call_id": "c2", "name": "f",
                                "arguments": "{}"},
                               {"type": "function_call_output", "call_id": "c2",
                                "output": "r"}],
}


@pytest.mark.parametrize("label", list(HOSTED))
def test_items_with_no_chat_form_come_back_as_they_were_added(engine: Engine,
                                                               label: str) -> None:
    items = HOSTED[label]
    assert round_trip(RefoldSession(f"hosted {label}", engine), items) == items


def test_the_proxy_form_still_refuses_items_with_no_chat_form() -> None:
    """``/v1/responses`` converts without ``round_trip``: nothing kept, nothing new upstream."""
    with pytest.raises(InvalidInput, match="web_search_call"):
        input_messages(HOSTED["web_search_call"])
    with pytest.raises(InvalidInput, match="item_reference"):
        input_messages(HOSTED["item_reference alone"])


# -- refusals, files, tool outputs with images -------------------------------------------------

def test_a_chat_completions_refusal_is_kept_and_sent_back_next_run(engine: Engine,
                                                                     store: Store) -> None:
    """A refusal was stored as empty text and left out of get_items: the next run's history
    lost the assistant turn."""
    body = json.dumps({
        "id": "chatcmpl-r", "object": "chat.completion", "created": 0, "model": "scripted-model",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {
            "role": "assistant", "content": None,
            "refusal": "I can't help with picking locks."}}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}}).encode()
    with serve([ScriptedReply(raw_body=body), "Sure, here is bread."]) as up:
        agent = chat_agent(up)
        session = RefoldSession("refusals", engine)

        async def runs() -> list[Any]:
            await Runner.run(agent, "How do I pick a lock?", session=session, run_config=CONFIG)
            items = await session.get_items()
            await Runner.run(agent, "How do I bake bread?", session=session, run_config=CONFIG)
            return items

        items = asyncio.run(runs())
    assert items[1] == {"type": "message", "role": "assistant", "content": [
        {"type": "refusal", "refusal": "I can't help with picking locks."}]}
    sent = up.llm.requests[1]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "user"]
    assert sent[2].get("refusal") == "I can't help with picking locks."
    assert ledger(store, "refusals")[1]["content"] == [
        {"type": "refusal", "refusal": "I can't help with picking locks."}]


def test_a_responses_refusal_part_comes_back_as_a_refusal_part(engine: Engine) -> None:
    reply = {"type": "message", "role": "assistant", "content": [
        {"type": "output_text", "text": "Partly:", "annotations": []},
        {"type": "refusal", "refusal": "I can't help with that."}]}
    items = [{"role": "user", "content": "q"}, reply]
    assert round_trip(RefoldSession("refusal part", engine), items) == items


def test_the_proxy_form_sends_a_refusal_as_its_text() -> None:
    """Without ``round_trip`` a refusal part was an empty text: its words are sent instead."""
    assert input_messages([{"type": "message", "role": "assistant", "content": [
        {"type": "refusal", "refusal": "No."}]}]) == [{"role": "assistant", "content": "No."}]


def test_a_user_file_reaches_the_model_and_comes_back_as_input_file(engine: Engine,
                                                                     store: Store) -> None:
    """An input_file part made Runner.run raise InvalidInput before any model call."""
    question: Any = {"role": "user", "content": [
        {"type": "input_text", "text": "Summarize this file."},
        {"type": "input_file", "file_data": PDF, "filename": "a.pdf"}]}
    with serve(["The PDF says hello."]) as up:
        session = RefoldSession("docs", engine)

        async def run() -> tuple[Any, list[Any]]:
            result = await Runner.run(chat_agent(up), [question], session=session,
                                      run_config=CONFIG)
            return result, await session.get_items()

        result, items = asyncio.run(run())
    assert result.final_output == "The PDF says hello."
    assert items[0] == question
    assert ledger(store, "docs")[0]["content"][1] == {
        "type": "file", "file": {"file_data": PDF, "filename": "a.pdf"}}
    assert up.llm.requests[0]["messages"][1]["content"][1]["type"] == "file"


def test_a_file_given_by_id_comes_back_and_a_file_url_is_refused(engine: Engine) -> None:
    items = [{"role": "user", "content": [{"type": "input_file", "file_id": "file-123"}]}]
    assert round_trip(RefoldSession("file id", engine), items) == items
    with pytest.raises(InvalidInput, match="file_url"):
        input_messages([{"role": "user", "content": [
            {"type": "input_file", "file_url": "https://x/a.pdf"}]}], round_trip=True)


TOOL_IMAGE: list[dict[str, Any]] = [{"role": "user", "content": "q"},
              {"type": "function_call", "call_id": "c2", "name": "screenshot",
               "arguments": "{}"},
              {"type": "function_call_output", "call_id": "c2", "output": [
                  {"type": "input_text", "text": "see image"},
                  {"type": "input_image", "image_url": PNG}]}]


def test_a_tool_output_list_comes_back_as_the_same_list(engine: Engine, store: Store) -> None:
    """It came back flattened to its text ("see image\\n"), the image dropped."""
    assert round_trip(RefoldSession("tool image", engine), TOOL_IMAGE) == TOOL_IMAGE
    tool = ledger(store, "tool image")[2]
    assert tool["content"] == "see image\n"  # a tool message holds text only
    assert tool[KEPT] == {"output": TOOL_IMAGE[2]["output"]}


def test_a_tool_output_list_is_not_given_back_once_its_text_was_rewritten() -> None:
    """Compaction may prune a tool result's content: the kept list is then stale."""
    tool = input_messages(TOOL_IMAGE, round_trip=True)[2]
    assert to_items([tool])[0]["output"] == TOOL_IMAGE[2]["output"]
    assert to_items([{**tool, "content": "[pruned]"}])[0]["output"] == "[pruned]"


# -- session settings ------------------------------------------------------------------------

def test_get_items_without_a_limit_honours_the_sessions_own_limit(engine: Engine) -> None:
    session = RefoldSession("limited", engine, session_settings=SessionSettings(limit=2))
    items = [{"role": "user", "content": f"m{i}"} for i in range(5)]

    async def reads() -> tuple[list[Any], list[Any], list[Any]]:
        await session.add_items(items)
        return await session.get_items(), await session.get_items(limit=3), \
            await RefoldSession("limited", engine).get_items()

    default, explicit, unlimited = asyncio.run(reads())
    assert default == items[-2:] and explicit == items[-3:] and unlimited == items


# -- shapes ----------------------------------------------------------------------------------

def test_list_content_and_image_detail_come_back_as_added(engine: Engine) -> None:
    items = [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
             {"role": "user", "content": [
                 {"type": "input_text", "text": "look"},
                 {"type": "input_image", "image_url": "https://x/y.png", "detail": "auto"},
                 {"type": "input_image", "image_url": PNG, "detail": "low"}]},
             {"role": "developer", "content": [{"type": "input_text", "text": "dev"}]}]
    assert round_trip(RefoldSession("lists", engine), items) == items


def test_what_the_chat_form_normalizes_is_documented(engine: Engine) -> None:
    """The module docstring's list: a message item's type (user), ids and statuses, the short
    form of an assistant message, reasoning, and an orphan tool result (refold's view repair
    drops it: providers reject a result with no call)."""
    items = [{"type": "message", "role": "user", "content": "q"},
             {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "gAAAA"},
             {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
              "content": [{"type": "output_text", "text": "a", "annotations": []}]},
             {"id": "fc_1", "type": "function_call", "call_id": "c1", "name": "f",
              "arguments": "{}", "status": "completed"},
             {"type": "function_call_output", "call_id": "c1", "output": "r"},
             {"role": "assistant", "content": "plain reply"},
             {"type": "function_call_output", "call_id": "zz", "output": "orphan"}]
    assert round_trip(RefoldSession("normalized", engine), items) == [
        {"role": "user", "content": "q"},
        {"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": "a", "annotations": []}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "r"},
        {"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": "plain reply", "annotations": []}]}]


def test_the_proxy_form_is_unchanged_for_what_it_accepted() -> None:
    """What ``/v1/responses`` sends upstream (and the identities it stores) stays as it was: a
    single text part is a string, ``detail: auto`` is left out, a tool output list is its text
    (its images labelled, and sent after the results in a user message of their own: they
    were dropped before, and Codex's ``view_image`` never reached the model), and no message
    carries the kept key."""
    messages = input_messages([
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {"role": "user", "content": [
            {"type": "input_image", "image_url": "https://x/y.png", "detail": "auto"}]},
        *TOOL_IMAGE[1:]])
    assert messages == [
        {"role": "user", "content": "hi"},
        {"role": "user", "content": [{"type": "image_url",
                                      "image_url": {"url": "https://x/y.png"}}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c2", "type": "function",
             "function": {"name": "screenshot", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c2", "content": "see image\n[image]"},
        {"role": "user", "content": [{"type": "text", "text": TOOL_IMAGES_NOTE},
                                     {"type": "image_url", "image_url": {"url": PNG}}]}]
