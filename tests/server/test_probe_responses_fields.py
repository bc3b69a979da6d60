"""``/v1/responses``: the request fields refold cannot honour are refused, the others translated
or accepted, never silently dropped (the official openai SDK and openai-agents over a socket,
against a scripted chat-completions upstream).

Before, every one of them was dropped and the request answered 200: ``conversation``
(openai-agents' ``conversation_id``) sent the model only the new turn, so the agent lost its
memory; ``prompt`` (a stored template) ran the model without its instructions; ``background``
ran in the foreground; ``text.verbosity`` and the logprobs ``include`` never reached the
upstream. README ("OpenAI Responses") lists what is translated, accepted and refused.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import openai
import pytest

from refold.testing import RunningLLM, ScriptedReply, llm_server, serve

ProxyFactory = Callable[..., Any]
MODEL = "scripted-model"
LOGPROBS = "message.output_text.logprobs"


def sdk(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="none", max_retries=0, timeout=30)


@pytest.mark.parametrize("conversation", ["conv_abc123", {"id": "conv_abc123"}],
                         ids=["id", "object"])
def test_conversation_is_refused_naming_what_to_do_instead(
        start_one_proxy: ProxyFactory, conversation: Any) -> None:
    with serve(["never sent"]) as up:
        proxy = start_one_proxy(up)
        client = sdk(proxy.base_url)
        for stream in (False, True):
            with pytest.raises(openai.BadRequestError) as bad:
                client.responses.create(model=MODEL, input="I am Cy.", stream=stream,
                                        conversation=conversation)
            error = bad.value.body
            assert isinstance(error, dict) and error["type"] == "invalid_request_error"
            assert "'conversation' is not supported" in error["message"]
            assert "previous_response_id" in error["message"] and "input" in error["message"]
        assert up.llm.requests == []


def test_openai_agents_conversation_id_is_a_400_not_a_lost_memory(
        start_one_proxy: ProxyFactory) -> None:
    agents = pytest.importorskip("agents")
    agents.set_tracing_disabled(True)
    with serve(["Hello Cy.", "You are Cy."]) as up:
        proxy = start_one_proxy(up)

        async def run() -> None:
            client = openai.AsyncOpenAI(base_url=proxy.base_url, api_key="none", max_retries=0)
            agent = agents.Agent(name="A", instructions="Be brief.",
                                 model=agents.OpenAIResponsesModel(MODEL, client))
            with pytest.raises(openai.BadRequestError, match="'conversation' is not supported"):
                await agents.Runner.run(agent, "I am Cy.", conversation_id="conv_abc123")
            # what to do instead: previous_response_id, which refold supports
            first = await agents.Runner.run(agent, "I am Cy.")
            second = await agents.Runner.run(agent, "Who am I?",
                                             previous_response_id=first.last_response_id)
            assert second.final_output == "You are Cy."
            await client.close()

        asyncio.run(run())
    assert len(up.llm.requests) == 2
    assert [m["content"] for m in up.llm.requests[1]["messages"] if m["role"] != "system"] == [
        "I am Cy.", "Hello Cy.", "Who am I?"]


@pytest.mark.parametrize(("extra", "said"), [
    ({"prompt": {"id": "pmpt_123", "variables": {"city": "Paris"}}}, "'prompt'"),
    ({"prompt": {"id": "pmpt_123", "version": "2"}}, "'prompt'"),
    ({"background": True}, "'background' must be false"),
    ({"truncation": "middle"}, "'truncation' must be"),
    ({"top_logprobs": 21, "include": [LOGPROBS]}, "'top_logprobs' must be"),
    ({"max_tool_calls": -1}, "'max_tool_calls' must be"),
    ({"include": LOGPROBS}, "'include' must be a list"),
    ({"text": {"verbosity": "terse"}}, "'text.verbosity' must be"),
], ids=["prompt", "prompt-version", "background", "truncation", "top-logprobs",
        "max-tool-calls", "include", "verbosity"])
def test_what_refold_cannot_honour_is_a_400(start_one_proxy: ProxyFactory,
                                            extra: dict[str, Any], said: str) -> None:
    with serve(["never sent"]) as up:
        proxy = start_one_proxy(up)
        client = sdk(proxy.base_url)
        for stream in (False, True):
            with pytest.raises(openai.BadRequestError) as bad:
                client.responses.create(model=MODEL, input="hello", stream=stream,
                                        extra_body=extra)
            assert said in bad.value.message
            assert bad.value.code == "invalid_input"
        assert up.llm.requests == []


def test_accepted_fields_run_and_are_echoed(start_one_proxy: ProxyFactory) -> None:
    """``truncation: auto`` (refold compacts), ``max_tool_calls`` (built-in tools only: refold
    runs none), ``background: false``, the includes of what refold never produces, and
    ``context_management`` run the request; ``truncation`` is echoed."""
    with serve(["ok", "ok"]) as up:
        proxy = start_one_proxy(up)
        client = sdk(proxy.base_url)
        reply = client.responses.create(
            model=MODEL, input="hello", truncation="auto", max_tool_calls=1, background=False,
            include=["reasoning.encrypted_content", "message.input_image.image_url"],
            extra_body={"context_management": [{"type": "compaction",
                                                "compact_threshold": 1000}]})
        assert reply.status == "completed" and reply.truncation == "auto"
        plain = client.responses.create(model=MODEL, input="hello", truncation="disabled")
        assert plain.truncation == "disabled"
    for body in up.llm.requests:
        assert not {"truncation", "max_tool_calls", "background", "include",
                    "context_management", "logprobs"} & set(body)


def test_verbosity_goes_upstream_as_chat_verbosity(start_one_proxy: ProxyFactory) -> None:
    with serve(["Oslo."]) as up:
        proxy = start_one_proxy(up)
        reply = sdk(proxy.base_url).responses.create(
            model=MODEL, input="Capital of Norway?",
            text={"verbosity": "low", "format": {"type": "text"}})
        assert reply.output_text == "Oslo." and reply.text.verbosity == "low"
    assert up.llm.requests[0]["verbosity"] == "low"


# -- logprobs ----------------------------------------------------------------------------------

def _token(text: str, top: int) -> dict[str, Any]:
    alternatives = [{"token": f"{text}~{n}", "logprob": -1.0 - n,
                     "bytes": list(f"{text}~{n}".encode())} for n in range(top)]
    return {"token": text, "logprob": -0.25, "bytes": list(text.encode()),
            "top_logprobs": alternatives}


class _Handler(llm_server._Handler):
    """The scripted server's handler, with logprobs (one token per content piece, ``top``
    alternatives) when the request asks for them, as an OpenAI upstream gives them."""

    top: int | None = None

    def _completion(self, body: dict[str, Any], reply: ScriptedReply) -> dict[str, Any]:
        out = super()._completion(body, reply)
        if body.get("logprobs"):
            text = reply.content or ""
            out["choices"][0]["logprobs"] = {"content": [
                _token(text[i:i + 16], body.get("top_logprobs") or 0)
                for i in range(0, len(text), 16)]}
        return out

    def _stream(self, body: dict[str, Any], reply: ScriptedReply) -> None:
        self.top = (body.get("top_logprobs") or 0) if body.get("logprobs") else None
        super()._stream(body, reply)

    def _chunk(self, obj: dict[str, Any]) -> None:
        for choice in obj.get("choices") or ():
            content = choice.get("delta", {}).get("content")
            if self.top is not None and content:
                choice["logprobs"] = {"content": [_token(content, self.top)]}
        super()._chunk(obj)


class _Running(RunningLLM):
    def __init__(self, replies: list[Any]) -> None:  # RunningLLM's, with this handler
        self.llm = llm_server.ScriptedLLM(replies=deque(replies))
        self._server = llm_server._Server(("127.0.0.1", 0), _Handler)
        self._server.llm = self.llm
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()


@contextmanager
def logprob_upstream(*replies: Any) -> Iterator[RunningLLM]:
    running = _Running(list(replies))
    try:
        yield running
    finally:
        running.close()


ANSWER = "The capital of Norway is Oslo."
PIECES = [ANSWER[i:i + 16] for i in range(0, len(ANSWER), 16)]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_logprobs_go_upstream_and_come_back_in_the_output_text(
        start_one_proxy: ProxyFactory, stream: bool) -> None:
    with logprob_upstream(ANSWER, ANSWER) as up:
        proxy = start_one_proxy(up)
        client = sdk(proxy.base_url)
        deltas: list[Any] = []
        done: list[Any] = []
        if stream:
            with client.responses.stream(model=MODEL, input="Capital of Norway?",
                                         top_logprobs=2, include=[LOGPROBS]) as events:
                for event in events:
                    if event.type == "response.output_text.delta":
                        deltas += event.logprobs
                    elif event.type == "response.output_text.done":
                        done += event.logprobs
                reply = events.get_final_response()
        else:
            reply = client.responses.create(model=MODEL, input="Capital of Norway?",
                                            top_logprobs=2, include=[LOGPROBS])
        # without the include: none asked upstream, none in the output
        plain = client.responses.create(model=MODEL, input="Again?", top_logprobs=2)
    asked, unasked = up.llm.requests
    assert asked["logprobs"] is True and asked["top_logprobs"] == 2
    assert "logprobs" not in unasked and "top_logprobs" not in unasked
    part = reply.output[0].content[0]  # type: ignore[union-attr]
    assert reply.output_text == ANSWER and part.type == "output_text"
    assert part.logprobs is not None
    assert [p.token for p in part.logprobs] == PIECES
    assert all(math.isclose(p.logprob, -0.25) for p in part.logprobs)
    assert [t.token for t in part.logprobs[0].top_logprobs] == [f"{PIECES[0]}~0",
                                                                f"{PIECES[0]}~1"]
    assert bytes(part.logprobs[1].bytes) == PIECES[1].encode()
    if stream:
        assert [p.token for p in deltas] == PIECES and [p.token for p in done] == PIECES
    assert not plain.output[0].content[0].logprobs  # type: ignore[union-attr]


def test_a_response_with_logprobs_is_continued(start_one_proxy: ProxyFactory) -> None:
    """Its stored output (the text part with its logprobs) is history as any other."""
    with logprob_upstream(ANSWER, "About 700,000.") as up:
        proxy = start_one_proxy(up)
        client = sdk(proxy.base_url)
        first = client.responses.create(model=MODEL, input="Capital of Norway?",
                                        include=[LOGPROBS])
        second = client.responses.create(model=MODEL, input="Population?",
                                         previous_response_id=first.id)
        assert second.output_text == "About 700,000."
    assert [(m["role"], m["content"]) for m in up.llm.requests[1]["messages"]] == [
        ("user", "Capital of Norway?"), ("assistant", ANSWER), ("user", "Population?")]
    raw = httpx.get(f"{proxy.base_url}/responses/{first.id}", timeout=30).json()
    assert raw["output"][0]["content"][0]["logprobs"][0]["token"] == PIECES[0]


def test_max_output_tokens_goes_as_max_completion_tokens_to_a_reasoning_model() -> None:
    """``max_output_tokens`` became ``max_tokens``, which OpenAI's o-series and gpt-5 refuse
    (400: use max_completion_tokens); other models keep the older name."""
    from refold.server.responses_wire import chat_body

    message = [{"role": "user", "content": "hi"}]
    for model, key in (("gpt-5-mini", "max_completion_tokens"), ("o3", "max_completion_tokens"),
                       ("gpt-4o-mini", "max_tokens"), ("llama3", "max_tokens")):
        body = chat_body({"model": model, "max_output_tokens": 64}, message, model)
        other = "max_tokens" if key == "max_completion_tokens" else "max_completion_tokens"
        assert body[key] == 64 and other not in body, (model, body)
