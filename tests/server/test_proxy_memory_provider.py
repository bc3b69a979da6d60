"""``memory_provider`` through ``refold serve``: an external provider installed under the
``refold.memory_providers`` entry point is loaded per tenant; its block joins the frozen system
prompt and its recall reaches the current user message."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from refold.runtime.recall import RECALL_OPEN
from refold.testing import serve

ProxyFactory = Callable[..., Any]

PROVIDER_MODULE = '''
SYNCED = []  # the length of the rows each finished turn handed to sync_turn

class EchoProvider:
    name = "echo"
    def system_prompt_block(self): return "<echo>external memory</echo>"
    def prefetch(self, query): return "echo recalls: " + query
    def sync_turn(self, messages): SYNCED.append(len(messages))
    def on_pre_compress(self, messages): return ""
    def on_session_end(self): pass
    def tool_schemas(self): return []
    def handle_tool_call(self, name, arguments): return "{}"
    def shutdown(self): pass
'''


@pytest.fixture
def echo_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    site = tmp_path / "site"
    dist = site / "refold_echo_serve-0.1.dist-info"
    dist.mkdir(parents=True)
    (site / "refold_echo_serve.py").write_text(PROVIDER_MODULE, encoding="utf-8")
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: refold-echo-serve\n"
                                   "Version: 0.1\n", encoding="utf-8")
    (dist / "entry_points.txt").write_text(
        "[refold.memory_providers]\necho-serve = refold_echo_serve:EchoProvider\n",
        encoding="utf-8")
    monkeypatch.syspath_prepend(str(site))
    yield
    sys.modules.pop("refold_echo_serve", None)


def test_serve_loads_the_external_provider_and_sends_its_recall(
        echo_installed: None, start_proxy: ProxyFactory) -> None:
    headers = {"X-Refold-Session": "recall"}
    history: list[dict[str, Any]] = [{"role": "user", "content": "where is staging?"}]
    with serve(["port 5433", "redis"]) as up:
        proxy = start_proxy(up, memory_provider="echo-serve")
        client = openai.OpenAI(base_url=proxy.base_url, api_key="none", max_retries=0)
        client.chat.completions.create(model="m", messages=history, extra_headers=headers)
        engine = proxy.app.state.proxy_app.proxy.pool._engines[""]
        engine.memory.manager.flush()  # the prefetch queued at turn start has answered
        history += [{"role": "assistant", "content": "port 5433"},
                    {"role": "user", "content": "and the cache?"}]
        client.chat.completions.create(model="m", messages=history, extra_headers=headers)
        first, second = (r["messages"] for r in up.llm.requests)
    assert "<echo>external memory</echo>" in first[0]["content"]
    assert first[0] == second[0]  # the system prompt stays frozen
    assert RECALL_OPEN not in first[-1]["content"]
    assert second[-1]["content"].startswith("and the cache?")
    assert "echo recalls: where is staging?" in second[-1]["content"]


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
def test_each_turn_reaches_memory_once_after_its_reply(
        echo_installed: None, start_proxy: ProxyFactory, stream: bool) -> None:
    """The proxy sends a reply (a stream's ``[DONE]``, a JSON body) before memory's after-turn
    work runs (the record held it back); every turn still reaches the provider, once."""
    import refold_echo_serve  # type: ignore[import-not-found]

    refold_echo_serve.SYNCED.clear()

    headers = {"X-Refold-Session": "synced"}
    history: list[dict[str, Any]] = [{"role": "user", "content": "first question"}]
    with serve(["one", "two", "three"]) as up:
        proxy = start_proxy(up, memory_provider="echo-serve")
        client = openai.OpenAI(base_url=proxy.base_url, api_key="none", max_retries=0)
        for turn in range(3):
            if stream:
                chunks = client.chat.completions.create(model="m", messages=history, stream=True,
                                                        extra_headers=headers)
                reply = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            else:
                reply = client.chat.completions.create(
                    model="m", messages=history, extra_headers=headers).choices[0].message.content
            history += [{"role": "assistant", "content": reply},
                        {"role": "user", "content": f"question {turn + 2}"}]
        engine = proxy.app.state.proxy_app.proxy.pool._engines[""]
        deadline = time.monotonic() + 10  # a hang guard only: the third runs after its [DONE]
        while len(refold_echo_serve.SYNCED) < 3 and time.monotonic() < deadline:
            engine.memory.manager.flush()
            time.sleep(0.01)
        engine.memory.manager.flush()
    assert refold_echo_serve.SYNCED == [2, 4, 6]


def test_an_unknown_memory_provider_is_a_clear_error(tmp_path: Path) -> None:
    from refold.assembly import tenant_memory
    from refold.config import Settings
    from refold.errors import NotFound
    from refold.store.sqlite import SQLiteStore

    store = SQLiteStore(str(tmp_path / "r.db"))
    try:
        with pytest.raises(NotFound, match="no memory provider named 'nope'"):
            tenant_memory(Settings(home=tmp_path, memory_provider="nope"), store, "", None)
    finally:
        store.close()
