"""Cost through ``refold serve`` (issue 14 item 7): replies priced with the user's overrides, the
summary model's usage charged to the session, and the per-session budget — a warning in
``X-Refold-Warnings``, or with ``budget_action = "refuse"`` a 402 in the provider's error shape
(the real openai and anthropic SDKs, against the scripted upstream)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest

from refold.compaction.llm_summarizer import SYSTEM_INSTRUCTION
from refold.store import Store
from refold.testing import ScriptedReply, serve

ProxyFactory = Callable[..., Any]
PRICING = {"gpt-4o": {"input": 10.0, "output": 20.0},
           "summary-model": {"input": 1.0, "output": 2.0}}
REPLY_USAGE = {"prompt_tokens": 3_000, "completion_tokens": 100, "total_tokens": 3_100}
SUMMARY_USAGE = {"prompt_tokens": 40_000, "completion_tokens": 2_000, "total_tokens": 42_000}
REPLY_COST = (3_000 * 10.0 + 100 * 20.0) / 1e6  # $0.032 at the override


def _upstream(body: dict[str, Any]) -> ScriptedReply:
    first = body["messages"][0]
    if first.get("role") == "system" and first.get("content") == SYSTEM_INSTRUCTION:
        return ScriptedReply(content="## Goal\nShip the build.\n## Progress\n### Done\n"
                             "- the build scripts were checked", usage=SUMMARY_USAGE)
    return ScriptedReply(content="ok", usage=REPLY_USAGE)


def sdk(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="none", max_retries=0, timeout=30)


def _only(store: Store) -> Any:
    sessions = store.list_sessions()
    assert len(sessions) == 1, [s.title for s in sessions]
    return sessions[0]


def test_replies_use_the_pricing_overrides_and_summaries_are_charged(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    filler = "The build log said: step N compiled module alpha beta gamma delta. " * 12
    history: list[dict[str, Any]] = []
    for i in range(30):
        history += [{"role": "user", "content": f"turn {i}: " + filler.replace("N", str(i))},
                    {"role": "assistant", "content": f"noted {i}"}]
    history.append({"role": "user", "content": "And now?"})
    with serve(default=_upstream) as up:
        # memory off: the flush after the checkpoint would review with the LLM in the
        # background (charged too: tests/runtime/test_cost.py); here only reply and summary
        proxy = start_proxy(up, context_length=8_000, summarizer="llm",
                            summarizer_model="summary-model", pricing=PRICING,
                            memory_enabled=False)
        sdk(proxy.base_url).chat.completions.create(model="gpt-4o", messages=history)  # type: ignore[arg-type]
    session = _only(sqlite_store)
    summary = (40_000 * 1.0 + 2_000 * 2.0) / 1e6
    assert session.cost_usd == pytest.approx(summary + REPLY_COST)
    assert session.model == "gpt-4o"


def test_budget_warn_goes_in_the_warnings_header(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    with serve(default=_upstream) as up:
        proxy = start_proxy(up, pricing=PRICING, session_budget_usd=0.03)
        client = sdk(proxy.base_url)
        history: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
        first = client.chat.completions.with_raw_response.create(model="gpt-4o",
                                                                 messages=history)  # type: ignore[arg-type]
        assert "budget" not in (first.headers.get("x-refold-warnings") or "")
        history += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}]
        second = client.chat.completions.with_raw_response.create(model="gpt-4o",
                                                                  messages=history)  # type: ignore[arg-type]
    assert "budget of $0.0300" in (second.headers.get("x-refold-warnings") or "")
    assert second.parse().choices[0].message.content == "ok"  # warned, still answered


def test_budget_refuse_is_a_402_for_the_openai_sdk(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    _refused_with_402(start_proxy, sqlite_store)


@pytest.mark.postgres
def test_budget_refuse_is_a_402_on_postgres(
        start_pg_proxy: ProxyFactory, postgres_store: Store) -> None:
    _refused_with_402(start_pg_proxy, postgres_store)


def _refused_with_402(start_proxy: ProxyFactory, store: Store) -> None:
    with serve(default=_upstream) as up:
        proxy = start_proxy(up, pricing=PRICING, session_budget_usd=0.03,
                            budget_action="refuse")
        client = sdk(proxy.base_url)
        history: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
        client.chat.completions.create(model="gpt-4o", messages=history)  # type: ignore[arg-type]
        history += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}]
        sent = len(up.llm.requests)
        with pytest.raises(openai.APIStatusError) as refused:
            client.chat.completions.create(model="gpt-4o", messages=history)  # type: ignore[arg-type]
        assert len(up.llm.requests) == sent  # nothing went upstream
    assert refused.value.status_code == 402
    assert "budget of $0.0300" in refused.value.message
    body = refused.value.body
    assert isinstance(body, dict) and body.get("code") == "session_budget_exceeded", body
    # the refused turn's user message is stored once (nothing lost); no reply was invented
    rows = [r.message for r in store.get_messages(_only(store).id)]
    assert [m["role"] for m in rows] == ["user", "assistant", "user"]


def test_budget_refuse_is_an_anthropic_error_for_the_anthropic_sdk(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    with serve(default=_upstream) as up:
        proxy = start_proxy(up, pricing=PRICING, session_budget_usd=0.03,
                            budget_action="refuse")
        client = anthropic.Anthropic(base_url=proxy.root, api_key="none", max_retries=0,
                                     timeout=30)
        history: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
        client.messages.create(model="gpt-4o", max_tokens=50, messages=history)  # type: ignore[arg-type]
        history += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}]
        with pytest.raises(anthropic.APIStatusError) as refused:
            client.messages.create(model="gpt-4o", max_tokens=50, messages=history)  # type: ignore[arg-type]
    assert refused.value.status_code == 402
    body = refused.value.body
    assert isinstance(body, dict) and body.get("type") == "error", body
    assert "budget of $0.0300" in body["error"]["message"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_reply_with_nonsense_usage_is_answered_and_stored(
        start_proxy: ProxyFactory, sqlite_store: Store, stream: bool) -> None:
    """An upstream (or a buggy gateway) reporting 1e300 prompt tokens and "many" completion
    tokens: the count is not tokens, so it counts nothing — the reply still reaches the client
    and the ledger (it was a 500, "internal error in refold: OverflowError", the reply lost:
    1e300 overflowed SQLite's INTEGER while recording it)."""
    nonsense = {"prompt_tokens": 1e300, "completion_tokens": "many", "total_tokens": -5,
                "prompt_tokens_details": {"cached_tokens": 10**40}}
    with serve(default=lambda body: ScriptedReply(content="fine", usage=nonsense)) as up:
        proxy = start_proxy(up, pricing=PRICING)
        client = sdk(proxy.base_url)
        messages: list[Any] = [{"role": "user", "content": "hi"}]
        if stream:
            chunks = client.chat.completions.create(model="gpt-4o", messages=messages,
                                                    stream=True)
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        else:
            text = client.chat.completions.create(model="gpt-4o", messages=messages
                                                  ).choices[0].message.content or ""
    assert text == "fine"
    session = _only(sqlite_store)
    stored = [m.message["content"] for m in sqlite_store.get_messages(session.id)]
    assert stored == ["hi", "fine"]
    assert (session.input_tokens, session.output_tokens, session.cache_read_tokens) == (0, 0, 0)
