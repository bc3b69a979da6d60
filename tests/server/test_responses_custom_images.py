"""``/v1/responses``: an image a tool returned (Codex's ``view_image``: a
``function_call_output`` whose ``output`` is a list holding an ``input_image``) reaches the
model. It was dropped: the upstream and the ledger got ``{"role": "tool", "content": ""}``.
As ``/v1/messages`` does for a chat upstream, the tool message labels it (``[image]``) and the
images follow the results in a user message of their own; a re-sent history gives the same
messages, so the ledger stores each once, in one session."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import pytest

from refold.messages.responses import input_messages
from refold.store import Store
from refold.testing import ScriptedReply, serve

ProxyFactory = Callable[..., Any]
MODEL = "gpt-5-codex"
PNG = ("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8Dw"
       "HwAFBQIAX8jx0gAAAABJRU5ErkJggg==")
VIEW_IMAGE = {"type": "function", "name": "view_image",
              "description": "View a local image file from the filesystem.", "strict": False,
              "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                             "required": ["path"], "additionalProperties": False}}
OPENING: list[dict[str, Any]] = [
    {"type": "message", "id": "msg_dev", "role": "developer",
     "content": [{"type": "input_text", "text": "You are a coding agent running in Codex."}]},
    {"type": "message", "id": "msg_ask", "role": "user",
     "content": [{"type": "input_text", "text": "what colour is dot.png?"}]}]


def sdk(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="none", max_retries=0, timeout=30)


def ledger(store: Store) -> list[dict[str, Any]]:
    sessions = store.list_sessions()
    assert len(sessions) == 1, [s.title for s in sessions]  # no branch, no second root
    return [r.message for r in store.get_messages(sessions[0].id)
            if r.message["role"] not in ("system", "developer")]


def turn(client: openai.OpenAI, items: list[Any], stream: bool) -> Any:
    if not stream:
        return client.responses.create(
            model=MODEL, input=items, tools=[VIEW_IMAGE],  # type: ignore[list-item]
            store=False, parallel_tool_calls=True)
    events: list[Any] = list(client.responses.create(
        model=MODEL, input=items, tools=[VIEW_IMAGE],  # type: ignore[list-item]
        store=False, parallel_tool_calls=True, stream=True))
    assert events[-1].type == "response.completed"
    return events[-1].response


def view(call_id: str, path: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function",
            "function": {"name": "view_image", "arguments": f'{{"path":"{path}"}}'}}


IMAGES_NOTE = "[the images of the tool results above]"  # (the text /v1/messages sends too)
IMAGE_PART = {"type": "image_url", "image_url": {"url": PNG, "detail": "high"}}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_view_image_output_reaches_the_model_and_is_stored_once(
        start_proxy: ProxyFactory, sqlite_store: Store, stream: bool) -> None:
    with serve([ScriptedReply(content=None, tool_calls=[view("call_img", "dot.png")]),
                "It is a grey dot.", "You are welcome."]) as up:
        client = sdk(start_proxy(up).base_url)
        first = turn(client, OPENING, stream)
        [item] = first.output
        assert item.type == "function_call" and item.name == "view_image"
        history = [*OPENING,
                   {"type": "function_call", "call_id": "call_img", "name": "view_image",
                    "arguments": item.arguments},
                   {"type": "function_call_output", "call_id": "call_img",
                    "output": [{"type": "input_image", "image_url": PNG, "detail": "high"}]}]
        second = turn(client, history, stream)
        assert second.output_text == "It is a grey dot."
        third = turn(client, [*history, {"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": "It is a grey dot."}]},
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "thanks"}]}], stream)
        assert third.output_text == "You are welcome."
    sent = [m for m in up.llm.requests[1]["messages"] if m["role"] != "system"]
    assert sent[-2:] == [{"role": "tool", "tool_call_id": "call_img", "content": "[image]"},
                         {"role": "user", "content": [{"type": "text", "text": IMAGES_NOTE},
                                                      IMAGE_PART]}]
    again = [m for m in up.llm.requests[2]["messages"] if m["role"] != "system"]
    assert again[2:4] == sent[-2:]  # the same messages when the history is re-sent
    stored = ledger(sqlite_store)
    assert [m["role"] for m in stored] == ["user", "assistant", "tool", "user", "assistant",
                                           "user", "assistant"]
    assert stored[2]["content"] == "[image]" and stored[3]["content"][1] == IMAGE_PART


def test_images_of_parallel_results_resent_in_pairs_follow_all_the_results(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    """Codex re-sends parallel calls as call, output, call, output: the images go after the
    last result, so the reply and its results stay together (one session)."""
    with serve([ScriptedReply(content=None, tool_calls=[view("call_1", "a.png"),
                                                        view("call_2", "b.png")]),
                "Two dots."]) as up:
        client = sdk(start_proxy(up).base_url)
        first = turn(client, OPENING, False)
        pairs: list[Any] = []
        for item in first.output:
            pairs += [{"type": "function_call", "call_id": item.call_id, "name": item.name,
                       "arguments": item.arguments},
                      {"type": "function_call_output", "call_id": item.call_id, "output": [
                          {"type": "input_text", "text": f"{item.call_id}:"},
                          {"type": "input_image", "image_url": PNG, "detail": "high"}]}]
        assert turn(client, [*OPENING, *pairs], False).output_text == "Two dots."
    sent = [m for m in up.llm.requests[1]["messages"] if m["role"] != "system"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "tool", "user"]
    assert [m["content"] for m in sent[2:4]] == ["call_1:\n[image]", "call_2:\n[image]"]
    assert sent[4]["content"] == [{"type": "text", "text": IMAGES_NOTE}, IMAGE_PART,
                                  IMAGE_PART]
    assert [m["role"] for m in ledger(sqlite_store)] == ["user", "assistant", "tool", "tool",
                                                         "user", "assistant"]


def test_a_text_only_output_list_is_its_text_as_before() -> None:
    """No image: no label and no user message (the stored form of such results is unchanged)."""
    messages = input_messages([
        {"role": "user", "content": "q"},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c",
         "output": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]}])
    assert messages[-1] == {"role": "tool", "tool_call_id": "c", "content": "a\nb"}
