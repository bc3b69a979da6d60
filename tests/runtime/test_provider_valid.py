"""Provider-valid, always (issue 11): every request the runtime builds passes the pairing and
role checks, whatever the ledger holds — a crash between storing a tool call and its result, an
imported transcript with an orphan result, a reply whose ``reasoning_content`` the client left
out when it re-sent the history. Both store backends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from refold.compaction.structure import provider_problems
from refold.messages.repair import MISSING_RESULT
from refold.runtime import Engine
from refold.store import Store

CALL = {"role": "assistant", "content": None, "tool_calls": [{
    "id": "call_1", "type": "function",
    "function": {"name": "terminal", "arguments": '{"cmd": "ls"}'}}]}


def engine_on(store: Store, tmp_path: Path) -> Engine:
    return Engine(store, model="gpt-4o-mini", context_length=100_000,
                  memory_dir=tmp_path / "memories", background_precompact=False)


def test_a_crash_between_the_call_and_its_result_resumes_into_a_valid_request(
        store: Store, tmp_path: Path) -> None:
    with engine_on(store, tmp_path) as engine:
        rt = engine.open_session(new=True, title="crashy")
        rt.prepare([{"role": "user", "content": "list the files"}])
        rt.record(CALL)  # committed; the process dies before the tool result is stored
    with engine_on(store, tmp_path) as engine:  # a new process resumes the session
        rt = engine.open_session("crashy")
        prepared = rt.prepare([{"role": "user", "content": "where were we?"}])
    assert provider_problems(prepared.messages) == []
    roles = [m["role"] for m in prepared.messages if m["role"] != "system"]
    assert roles == ["user", "assistant", "tool", "user"]
    marked = [m for m in prepared.messages if m["role"] == "tool"]
    assert marked == [{"role": "tool", "tool_call_id": "call_1", "content": MISSING_RESULT}]
    assert any("repaired" in w for w in prepared.warnings)
    # the ledger keeps what happened: no invented result stored
    assert [r.role for r in store.get_messages(rt.session_id)] == ["user", "assistant", "user"]


def test_an_imported_orphan_result_is_not_sent(store: Store, tmp_path: Path) -> None:
    session = store.create_session(title="imported")
    store.append_messages(session.id, [
        {"role": "user", "content": "hi"},
        {"role": "tool", "tool_call_id": "call_gone", "content": "output of a lost call"},
        {"role": "assistant", "content": "hello"}])
    with engine_on(store, tmp_path) as engine:
        prepared = engine.open_session("imported").prepare([{"role": "user", "content": "go"}])
    assert provider_problems(prepared.messages) == []
    assert all(m["role"] != "tool" for m in prepared.messages)


def test_the_proxy_path_repairs_a_history_the_client_sent_broken(
        store: Store, tmp_path: Path) -> None:
    history: list[dict[str, Any]] = [{"role": "user", "content": "list"}, CALL,
                                     {"role": "user", "content": "never mind"}]
    with engine_on(store, tmp_path) as engine:
        prepared = engine.open_session(new=True).prepare_history(history)
    assert provider_problems(prepared.messages) == []
    assert [m["role"] for m in prepared.messages] == ["user", "assistant", "tool", "user"]


def test_reasoning_content_goes_upstream_only_as_the_client_sent_it(
        store: Store, tmp_path: Path) -> None:
    question = {"role": "user", "content": "What is 2+2?"}
    with engine_on(store, tmp_path) as engine:
        rt = engine.open_session(new=True)
        rt.prepare_history([question])
        rt.record({"role": "assistant", "content": "4", "reasoning_content": "2 and 2 make 4"})
        # DeepSeek-style clients drop reasoning_content when they re-send the history
        stripped = [question, {"role": "assistant", "content": "4"},
                    {"role": "user", "content": "and 3+3?"}]
        sent = rt.prepare_history(stripped).messages
        assert all("reasoning_content" not in m for m in sent)
        rt.record({"role": "assistant", "content": "6"})
        # and on the next turn too (the fast path that follows the re-synced chain)
        sent = rt.prepare_history([*stripped, {"role": "assistant", "content": "6"},
                                   {"role": "user", "content": "thanks"}]).messages
        assert all("reasoning_content" not in m for m in sent)
        # a client that keeps it gets it sent as it sent it
        kept = [question, {"role": "assistant", "content": "4",
                           "reasoning_content": "2 and 2 make 4"},
                {"role": "user", "content": "and 3+3?"}]
        sent = rt.prepare_history(kept).messages
        assert [m.get("reasoning_content") for m in sent if m["role"] == "assistant"] == [
            "2 and 2 make 4"]
    stored = store.get_messages(rt.session_id)
    assert stored[1].message.get("reasoning_content") == "2 and 2 make 4"  # the ledger keeps it
