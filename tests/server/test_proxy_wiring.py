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
def _rows(store: Store, session_id: str) -> list[tuple[str, str]]:
    return [(r.role, str(r.message.get("content") or "")) for r in store.get_messages(session_id)]


def test_serve_rotate_on_compaction_continues_in_the_child(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    history = long_history()
    headers = {"X-Refold-Session": "ticket-7"}
    with serve(default=upstream(ScriptedReply(content=SUMMARY))) as up:
        proxy = start_proxy(up, context_length=8_000, rotate_on_compaction=True)
        client = sdk(proxy.base_url)
        client.chat.completions.create(model="m", messages=history, extra_headers=headers)
        history += [{"role": "assistant", "content": "Now we ship."},
                    {"role": "user", "content": "Then tag the release."}]
        client.chat.completions.create(model="m", messages=history, extra_headers=headers)
        last_sent = up.llm.requests[-1]["messages"]
    sessions = {s.title: s for s in sqlite_store.list_sessions()}
    assert set(sessions) == {"ticket-7", "ticket-7 #2"}
    parent, child = sessions["ticket-7"], sessions["ticket-7 #2"]
    assert parent.end_reason == "compaction"
    assert child.parent_session_id == parent.id and child.link_kind == "compaction"
    assert sqlite_store.resolve_resume(parent.id).id == child.id  # resume follows the chain
    rows = _rows(sqlite_store, child.id)
    assert rows[-4:] == [("user", "And now?"), ("assistant", "Now we ship."),
                         ("user", "Then tag the release."), ("assistant", "Now we ship.")]
    users = [text for role, text in rows if role == "user"]
    assert len(users) == len(set(users)), users  # nothing stored twice in the child
    assert not sqlite_store.get_messages(child.id, include_inactive=True)[len(rows):]
    assert len(rows) < len(history)  # the child holds the compacted view, not the history again
    assert _rows(sqlite_store, parent.id) == [(m["role"], m["content"]) for m in history[1:62]]
    assert last_sent[-1]["content"] == "Then tag the release."
    assert len(last_sent) < len(history) // 2  # the upstream got the compacted child view


def test_rotated_derived_session_continues_after_a_restart(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    history = long_history()
    with serve(default=upstream(ScriptedReply(content=SUMMARY))) as up:
        first = start_proxy(up, context_length=8_000, rotate_on_compaction=True)
        sdk(first.base_url).chat.completions.create(model="m", messages=history)
        # a second proxy process over the same database: nothing cached, resume from the store
        second = start_proxy(up, context_length=8_000, rotate_on_compaction=True)
        history += [{"role": "assistant", "content": "Now we ship."},
                    {"role": "user", "content": "Then tag the release."}]
        sdk(second.base_url).chat.completions.create(model="m", messages=history)
        history += [{"role": "assistant", "content": "Now we ship."},
                    {"role": "user", "content": "Done?"}]
        sdk(second.base_url).chat.completions.create(model="m", messages=history)
    sessions = sorted(sqlite_store.list_sessions(), key=lambda s: s.started_at)
    assert len(sessions) == 2, [s.title for s in sessions]
    root, child = sessions
    assert root.title and root.title.startswith("conv-") and child.title == f"{root.title} #2"
    rows = _rows(sqlite_store, child.id)
    assert rows[-5:] == [("assistant", "Now we ship."), ("user", "Then tag the release."),
                         ("assistant", "Now we ship."), ("user", "Done?"),
                         ("assistant", "Now we ship.")]
    users = [text for role, text in rows if role == "user"]
    assert len(users) == len(set(users)), users
    assert len(sqlite_store.get_messages(child.id, include_inactive=True)) == len(rows)
