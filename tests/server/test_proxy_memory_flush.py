"""Memory flush through ``refold serve`` (issue 13 item 7): a proxied session is reviewed for
memory when its runtime leaves the cache (eviction) and when the proxy stops — after the
responses, never on their path; the LLM reviewer is the summary endpoint when there is one."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai

from refold.runtime.memory_flush import EVENT
from refold.store import Store
from refold.testing import ScriptedReply, serve

ProxyFactory = Callable[..., Any]


def _memory_text(home: Path) -> str:
    return "".join(p.read_text(encoding="utf-8") for p in (home / "memories").glob("*.md"))


def _wait_for(check: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "condition never reached"
        time.sleep(0.02)


def _say(client: openai.OpenAI, session: str, text: str) -> None:
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": text}],
                                   extra_headers={"X-Refold-Session": session})


def _flushed(store: Store, title: str) -> list[dict[str, Any]]:
    session = store.resolve_session(title)
    return [e.payload for e in store.list_events(session.id, EVENT)]


def test_an_evicted_session_is_flushed_by_the_extractor(
        start_proxy: ProxyFactory, sqlite_store: Store, tmp_path: Path) -> None:
    home, store = tmp_path / "home", sqlite_store
    with serve(default=lambda _b: "ok") as up:
        proxy = start_proxy(up, capacity=1)
        client = openai.OpenAI(base_url=proxy.base_url, api_key="none", max_retries=0)
        _say(client, "first", "Remember that the release branch is cut on Thursdays.")
        assert "Thursdays" not in _memory_text(home)  # one turn: no review yet
        _say(client, "second", "hello")  # capacity 1: "first" leaves the cache
        _wait_for(lambda: bool(_flushed(store, "first")))  # the event follows the writes
        assert "release branch is cut on Thursdays" in _memory_text(home)
        assert [f["reason"] for f in _flushed(store, "first")] == ["session_end"]


def test_the_proxy_flushes_open_sessions_when_it_stops(start_proxy: ProxyFactory,
                                                       tmp_path: Path) -> None:
    home = tmp_path / "home"
    with serve(default=lambda _b: "ok") as up:
        proxy = start_proxy(up)
        client = openai.OpenAI(base_url=proxy.base_url, api_key="none", max_retries=0)
        _say(client, "open", "记住：测试环境每晚重置。")
        assert "测试环境每晚重置" not in _memory_text(home)
        proxy.server.should_exit = True  # shutdown closes the cached runtimes and engines
        _wait_for(lambda: "测试环境每晚重置" in _memory_text(home))


def test_an_llm_reviewer_on_the_summary_endpoint_flushes_an_evicted_session(
        start_one_proxy: ProxyFactory, tmp_path: Path) -> None:
    home = tmp_path / "home"
    add = {"id": "m1", "type": "function", "function": {
        "name": "memory",
        "arguments": '{"action": "add", "target": "memory", "content": "Release cut: Thursdays"}'}}
    reviews: list[dict[str, Any]] = []

    def reviewer(body: dict[str, Any]) -> ScriptedReply:
        reviews.append(body)
        if any(m.get("role") == "tool" for m in body["messages"]):
            return ScriptedReply(content="saved")
        return ScriptedReply(content=None, tool_calls=[add])

    with serve(default=lambda _b: "ok") as up, serve(default=reviewer) as summary:
        proxy = start_one_proxy(up, capacity=1, summarizer="llm",
                                summarizer_url=summary.base_url)
        client = openai.OpenAI(base_url=proxy.base_url, api_key="none", max_retries=0)
        _say(client, "first", "Remember that the release branch is cut on Thursdays.")
        _say(client, "second", "hello")
        _wait_for(lambda: "Release cut: Thursdays" in _memory_text(home))
    assert "release branch is cut on Thursdays" in reviews[0]["messages"][-1]["content"]
    assert [t["function"]["name"] for t in reviews[0]["tools"]] == ["memory"]
    assert len(up.llm.requests) == 2  # the main model answered the two turns, nothing else


def test_serve_flushes_a_session_a_dead_process_left_unflushed(
        start_proxy: ProxyFactory, sqlite_store: Store, tmp_path: Path) -> None:
    from refold.runtime import Engine

    home = tmp_path / "home"
    dead = Engine(sqlite_store, model="m", context_length=32_000, memory_dir=home / "memories")
    rt = dead.open_session(new=True, title="from-the-dead")  # an earlier serve, killed
    rt.prepare([{"role": "user", "content": "Remember that the backup runs at 02:00."}])
    rt.record({"role": "assistant", "content": "ok"})
    try:
        with serve(default=lambda _b: "ok") as up:
            proxy = start_proxy(up, memory_flush_idle_minutes=0.005)  # idle after 0.3 s
            client = openai.OpenAI(base_url=proxy.base_url, api_key="none", max_retries=0)
            _say(client, "live", "Remember that the office closes at six.")
            # the flush event is recorded after the memory writes: wait for it, then both hold
            _wait_for(lambda: bool(_flushed(sqlite_store, "from-the-dead")))
            assert "backup runs at 02:00" in _memory_text(home)
            assert _flushed(sqlite_store, "from-the-dead")[0]["reason"] == "idle"
            time.sleep(0.8)  # several sweeps later: the live session is open in the proxy
            assert _flushed(sqlite_store, "live") == []
    finally:
        dead.close()
    assert _memory_text(home).count("backup runs at 02:00") == 1


def test_memory_reviews_a_running_session_after_its_replies_went_out(
        start_one_proxy: ProxyFactory, tmp_path: Path) -> None:
    """The review every N turns runs once a reply is sent, streamed or not, while the proxy
    keeps serving (no eviction, no stop): the after-turn work a turn held back is done."""
    home = tmp_path / "home"
    with serve(default=lambda _b: "ok") as up:
        proxy = start_one_proxy(up, memory_review_every_turns=2)
        client = openai.OpenAI(base_url=proxy.base_url, api_key="none", max_retries=0)
        history = [{"role": "user", "content": "Remember that the release branch is cut on "
                                               "Thursdays."}]
        client.chat.completions.create(model="m", messages=history,
                                       extra_headers={"X-Refold-Session": "json"})
        assert "Thursdays" not in _memory_text(home)  # one turn: no review yet
        history += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "hi"}]
        client.chat.completions.create(model="m", messages=history,
                                       extra_headers={"X-Refold-Session": "json"})
        _wait_for(lambda: "release branch is cut on Thursdays" in _memory_text(home))

        streamed = [{"role": "user", "content": "Remember that staging resets at midnight."}]
        for text in ("", "thanks"):
            if text:
                streamed += [{"role": "assistant", "content": "ok"},
                             {"role": "user", "content": text}]
            with client.chat.completions.create(
                    model="m", messages=streamed, stream=True,
                    extra_headers={"X-Refold-Session": "streamed"}) as chunks:
                assert "".join(c.choices[0].delta.content or "" for c in chunks
                               if c.choices) == "ok"
        _wait_for(lambda: "staging resets at midnight" in _memory_text(home).lower())
