"""A request's ``max_tokens`` (chat ``max_tokens`` / ``max_completion_tokens``, Messages
``max_tokens``, Responses ``max_output_tokens``) is that turn's output reserve through
``refold serve``: the real openai and anthropic SDKs against the scripted upstream."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest

from refold.store import Store
from refold.testing import serve

ProxyFactory = Callable[..., Any]
WINDOW = 20_000  # threshold 15,000 (the 0.75 floor); a reserve of 14,000 lowers it to 6,000


def history(turns: int = 40) -> list[dict[str, Any]]:
    filler = "The build log said: step N compiled module alpha beta gamma delta. " * 12
    out: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    for i in range(turns):
        out += [{"role": "user", "content": f"turn {i}: " + filler.replace("N", str(i))},
                {"role": "assistant", "content": f"noted {i}"}]
    return [*out, {"role": "user", "content": "And now?"}]


@pytest.mark.parametrize("api", ["chat", "chat_max_completion", "messages", "responses"])
def test_the_proxy_takes_the_reserve_from_the_request(
        start_proxy: ProxyFactory, api: str, sqlite_store: Store) -> None:
    with serve() as up:
        proxy = start_proxy(up, context_length=WINDOW)
        messages = history()
        if api == "chat":
            openai.OpenAI(base_url=proxy.base_url, api_key="none", max_retries=0).chat \
                .completions.create(model="m", messages=messages, max_tokens=14_000)  # type: ignore[arg-type]
        elif api == "chat_max_completion":
            openai.OpenAI(base_url=proxy.base_url, api_key="none", max_retries=0).chat \
                .completions.create(model="m", messages=messages,  # type: ignore[arg-type]
                                    max_completion_tokens=14_000)
        elif api == "messages":
            anthropic.Anthropic(base_url=proxy.root, api_key="none", max_retries=0) \
                .messages.create(model="m", max_tokens=14_000, system=messages[0]["content"],
                                 messages=messages[1:])  # type: ignore[arg-type]
        else:
            openai.OpenAI(base_url=proxy.base_url, api_key="none", max_retries=0).responses \
                .create(model="m", instructions=messages[0]["content"],
                        input=messages[1:], max_output_tokens=14_000)  # type: ignore[arg-type]
    sessions = sqlite_store.list_sessions()
    assert len(sessions) == 1
    assert sqlite_store.latest_checkpoint(sessions[0].id) is not None, api


def test_the_proxy_without_max_tokens_keeps_the_history(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    with serve() as up:
        proxy = start_proxy(up, context_length=WINDOW)
        openai.OpenAI(base_url=proxy.base_url, api_key="none", max_retries=0).chat \
            .completions.create(model="m", messages=history())  # type: ignore[arg-type]
    assert sqlite_store.latest_checkpoint(sqlite_store.list_sessions()[0].id) is None
