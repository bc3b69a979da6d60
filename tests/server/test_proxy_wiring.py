"""Settings that reach the runtime through ``refold serve``: the llm summarizer (with its
builtin fallback) and ``rotate_on_compaction``, against the scripted upstream."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai

from refold.compaction.llm_summarizer import SYSTEM_INSTRUCTION
from refold.store import Store
from refold.testing import ScriptedReply, serve

ProxyFactory = Callable[..., Any]
SYSTEM = {"role": "system", "content": "You are terse."}
SUMMARY = "## Goal\nShip the build.\n## Progress\n### Done\n- modules 0-29 compiled"


def sdk(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="none", max_retries=0, timeout=30)


def long_history(turns: int = 30) -> list[dict[str, Any]]:
    filler = "The build log said: step N compiled module alpha beta gamma delta. " * 12
    history: list[dict[str, Any]] = [SYSTEM]
    for i in range(turns):
        history += [{"role": "user", "content": f"turn {i}: " + filler.replace("N", str(i))},
                    {"role": "assistant", "content": f"noted {i}"}]
    history.append({"role": "user", "content": "And now?"})
    return history


def is_summary_request(body: dict[str, Any]) -> bool:
    first = body["messages"][0]
    return first.get("role") == "system" and first.get("content") == SYSTEM_INSTRUCTION


def upstream(summary: ScriptedReply) -> Callable[[dict[str, Any]], ScriptedReply]:
    def reply(body: dict[str, Any]) -> ScriptedReply:
        return summary if is_summary_request(body) else ScriptedReply(content="Now we ship.")
    return reply


def only_session(store: Store) -> str:
    sessions = store.list_sessions()
    assert len(sessions) == 1, [s.title for s in sessions]
    return sessions[0].id


def test_serve_with_the_llm_summarizer_writes_an_llm_checkpoint(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    with serve(default=upstream(ScriptedReply(content=SUMMARY))) as up:
        proxy = start_proxy(up, context_length=8_000, summarizer="llm",
                            summarizer_model="summary-model")
        reply = sdk(proxy.base_url).chat.completions.create(model="m", messages=long_history())
        bodies = list(up.llm.requests)
    assert reply.choices[0].message.content == "Now we ship."
    summaries = [b for b in bodies if is_summary_request(b)]
    assert summaries and summaries[0]["model"] == "summary-model"
    checkpoint = sqlite_store.latest_checkpoint(only_session(sqlite_store))
    assert checkpoint is not None
    assert checkpoint.summarizer == "llm:summary-model" and checkpoint.status == "ok"
    assert "modules 0-29 compiled" in checkpoint.summary


def test_serve_falls_back_to_the_builtin_summarizer_when_the_summary_model_fails(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    broken = ScriptedReply(status=500, error={"error": {"message": "boom"}})
    with serve(default=upstream(broken)) as up:
        proxy = start_proxy(up, context_length=8_000, summarizer="llm",
                            summarizer_model="summary-model")
        reply = sdk(proxy.base_url).chat.completions.create(model="m", messages=long_history())
        bodies = list(up.llm.requests)
    assert reply.choices[0].message.content == "Now we ship."
    assert [b["model"] for b in bodies if is_summary_request(b)][:1] == ["summary-model"]
    checkpoint = sqlite_store.latest_checkpoint(only_session(sqlite_store))
    assert checkpoint is not None
    assert checkpoint.summarizer == "builtin" and checkpoint.status == "fallback"


def test_serve_builtin_summarizer_by_default_sends_no_summary_request(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    with serve(default=upstream(ScriptedReply(content=SUMMARY))) as up:
        proxy = start_proxy(up, context_length=8_000)
        sdk(proxy.base_url).chat.completions.create(model="m", messages=long_history())
        bodies = list(up.llm.requests)
    assert not any(is_summary_request(b) for b in bodies)
    checkpoint = sqlite_store.latest_checkpoint(only_session(sqlite_store))
    assert checkpoint is not None and checkpoint.summarizer == "builtin"
