"""SessionRuntime: opening sessions, prepare/record, proxy sync, compaction, error handling."""

from __future__ import annotations

from pathlib import Path

import pytest

from refold.errors import ContextOverflowError, InvalidInput, NotFound, UpstreamError
from refold.runtime import Engine, classify_error, error_action
from refold.store import Store

from ._helpers import WINDOW, answer, tool_turn

SYSTEM = "You are a test agent."


def test_open_new_resume_latest_title_and_branch(engine: Engine, store: Store) -> None:
    first = engine.open_session(new=True, title="alpha")
    first.prepare([{"role": "user", "content": "hello"}], system_prompt=SYSTEM)
    first.record({"role": "assistant", "content": "hi"})
    assert engine.open_session().session_id == first.session_id  # latest
    assert engine.open_session("alpha").session_id == first.session_id
    assert engine.open_session(first.session_id[:8]).session_id == first.session_id
    branch = engine.open_session("alpha", branch_at=1, title="alpha-b")
    assert branch.session_id != first.session_id
    assert store.get_session(branch.session_id).parent_session_id == first.session_id
    with pytest.raises(InvalidInput):
        engine.open_session("alpha", new=True)
    with pytest.raises(NotFound):
        engine.open_session("no-such-session")


def test_prepare_sends_system_snapshot_and_new_messages(engine: Engine, store: Store) -> None:
    rt = engine.open_session(new=True)
    prepared = rt.prepare([{"role": "user", "content": "hello"}], system_prompt=SYSTEM)
    assert prepared.messages[0]["role"] == "system"
    assert prepared.messages[0]["content"].startswith(SYSTEM)
    assert prepared.messages[-1] == {"role": "user", "content": "hello"}
    assert prepared.compaction is None and prepared.tokens < prepared.threshold
    assert prepared.threshold < prepared.context_length == WINDOW
    rt.record({"role": "assistant", "content": "hi"},
              usage={"prompt_tokens": 30, "completion_tokens": 2})
    session = store.get_session(rt.session_id)
    assert session.message_count == 2
    assert (session.input_tokens, session.output_tokens) == (30, 2)


def test_prepare_rejects_invalid_messages_and_stores_nothing(engine: Engine,
                                                             store: Store) -> None:
    rt = engine.open_session(new=True)
    with pytest.raises(InvalidInput):
        rt.prepare([{"role": "wizard", "content": "x"}])
    with pytest.raises(InvalidInput):
        rt.prepare("hello")  # type: ignore[arg-type]
    assert store.get_session(rt.session_id).message_count == 0


def test_prepare_history_never_duplicates(engine: Engine, store: Store) -> None:
    rt = engine.open_session(new=True)
    history = [{"role": "system", "content": "client system"},
               {"role": "user", "content": "one"}]
    for turn in range(3):
        prepared = rt.prepare_history(history)
        assert prepared.messages[0]["content"].startswith("client system")
        reply = {"role": "assistant", "content": f"answer {turn}"}
        rt.record(reply)
        history = [*history, reply, {"role": "user", "content": f"next {turn}"}]
    rows = store.get_messages(rt.session_id)
    assert [r.message["content"] for r in rows] == [
        "one", "answer 0", "next 0", "answer 1", "next 1", "answer 2"]
    assert len(store.list_events(rt.session_id, "system_prompt")) == 1


def test_compaction_keeps_the_ledger_and_fits(engine: Engine, store: Store) -> None:
    rt = engine.open_session(new=True)
    compactions = 0
    for i in range(12):
        prepared = rt.prepare(tool_turn(i), system_prompt=SYSTEM)
        compactions += prepared.compaction is not None
        rt.record(answer(i))
        assert prepared.tokens <= WINDOW
    assert compactions >= 1
    assert store.list_checkpoints(rt.session_id)
    assert store.get_session(rt.session_id).message_count == 12 * 4  # nothing deleted
    final = rt.prepare([{"role": "user", "content": "status?"}], system_prompt=SYSTEM)
    assert final.messages[0]["role"] == "system"
    assert final.messages[-1]["content"] == "status?"
    assert final.tokens < final.threshold


def test_system_prompt_is_byte_identical_across_compactions(engine: Engine) -> None:
    rt = engine.open_session(new=True)
    systems = set()
    for i in range(10):
        prepared = rt.prepare(tool_turn(i), system_prompt=SYSTEM)
        systems.add(prepared.messages[0]["content"])
        rt.record(answer(i))
    assert len(systems) == 1


def test_handle_error_compacts_on_overflow_only(engine: Engine) -> None:
    rt = engine.open_session(new=True)
    for i in range(4):
        rt.prepare(tool_turn(i, size=200), system_prompt=SYSTEM)
        rt.record(answer(i))
    before = rt.prepare([], system_prompt=SYSTEM).tokens
    overflow = ContextOverflowError("too long", status=400)
    assert rt.handle_error(overflow, 0) is True
    assert rt.prepare([], system_prompt=SYSTEM).tokens < before
    assert rt.handle_error(UpstreamError("no", kind="auth", status=401), 0) is False
    assert rt.handle_error(overflow, 99) is False


def test_context_breakdown_adds_up(engine: Engine) -> None:
    rt = engine.open_session(new=True)
    prepared = rt.prepare(tool_turn(1), system_prompt=SYSTEM)
    parts = rt.context_breakdown()
    assert parts["total"] == prepared.tokens
    assert parts["threshold"] == prepared.threshold and parts["context_length"] == WINDOW
    assert parts["tail_by_role"]["tool"] == parts["tool_outputs"] > 0
    assert parts["parts"]["system"] > 0


@pytest.mark.parametrize("status,body,kind,action", [
    (400, '{"error":{"message":"maximum context length is 8192 tokens"}}', "overflow",
     "compact_and_retry"),
    (413, "too large", "overflow", "compact_and_retry"),
    (401, '{"error":{"message":"bad key"}}', "auth", "fail"),
    (429, "{}", "rate_limit", "retry_later"),
    (503, "", "server", "retry_later"),
])
def test_classify_error(status: int, body: str, kind: str, action: str) -> None:
    assert classify_error(status, body) == kind
    assert error_action(kind) == action


def test_engine_rejects_bad_window(store: Store, tmp_path: Path) -> None:
    with pytest.raises(InvalidInput):
        Engine(store, model="m", context_length=0)


def test_rotate_on_compaction_continues_in_a_child(store: Store, tmp_path: Path) -> None:
    from refold.compaction import CompactionPolicy

    policy = CompactionPolicy(rotate_on_compaction=True)
    with Engine(store, model="gpt-4o-mini", context_length=WINDOW, policy=policy,
                background_precompact=False) as engine:
        rt = engine.open_session(new=True, title="chain")
        first_id = rt.session_id
        for i in range(12):
            rt.prepare(tool_turn(i), system_prompt=SYSTEM)
            rt.record(answer(i))
        assert rt.session_id != first_id
        parent = store.get_session(first_id)
        assert parent.end_reason == "compaction"
        child = store.get_session(rt.session_id)
        assert child.link_kind == "compaction" and child.title and child.title.startswith("chain #")
        assert engine.open_session("chain").session_id == rt.session_id  # resume follows
        assert parent.message_count >= 4  # the parent's rows stay in the archive


def test_anti_thrash_state_is_per_session(engine: Engine) -> None:
    a = engine.open_session(new=True)
    b = engine.open_session(new=True)
    guard = a.checkpointer.trigger.guard  # block session a as two ineffective compactions would
    guard._strike("ineffective")
    guard._strike("ineffective")
    assert a.context_breakdown()["auto_compaction"]["blocked"] is True
    assert b.context_breakdown()["auto_compaction"]["blocked"] is False
    compacted = False
    for i in range(12):
        prepared = b.prepare(tool_turn(i), system_prompt=SYSTEM)
        b.record(answer(i))
        compacted = compacted or prepared.compaction is not None
    assert compacted


def test_explicit_compact(engine: Engine, store: Store) -> None:
    rt = engine.open_session(new=True)
    for i in range(3):
        rt.prepare(tool_turn(i), system_prompt=SYSTEM)
        rt.record(answer(i))
    assert rt.compact(force=False) is None  # under the threshold: nothing to do
    report = rt.compact()
    assert report is not None and report.tokens_after < report.tokens_before
    assert len(store.list_checkpoints(rt.session_id)) == 1


@pytest.mark.parametrize("bad", [["not a message"], [{"role": "user", "content": 5}],
                                 [{"role": "assistant", "content": None}]])
def test_bad_input_is_a_clear_error_and_stores_nothing(engine: Engine, store: Store,
                                                       bad: list) -> None:
    rt = engine.open_session(new=True)
    with pytest.raises(InvalidInput):
        rt.prepare(bad)
    with pytest.raises(InvalidInput):
        rt.prepare_history([{"role": "system", "content": "s"}, *bad])
    with pytest.raises(InvalidInput):
        rt.record({"content": 5})
    assert store.get_session(rt.session_id).message_count == 0


def test_empty_provider_reply_is_recorded_not_refused(engine: Engine, store: Store) -> None:
    rt = engine.open_session(new=True)
    rt.prepare([{"role": "user", "content": "hi"}])
    rt.record({"role": "assistant", "content": None, "tool_calls": []})
    last = store.get_messages(rt.session_id)[-1].message
    assert last == {"role": "assistant", "content": ""}


def test_proxy_history_across_compactions(engine: Engine, store: Store) -> None:
    rt = engine.open_session(new=True)
    history: list[dict] = [{"role": "system", "content": "client system"}]
    for i in range(16):
        history += tool_turn(i)
        prepared = rt.prepare_history(history)
        assert prepared.tokens <= WINDOW
        assert prepared.messages[0]["content"].startswith("client system")
        assert prepared.messages[-1] == history[-1]
        reply = answer(i)
        rt.record(reply)
        history.append(reply)
    assert store.list_checkpoints(rt.session_id)
    assert store.get_session(rt.session_id).message_count == len(history) - 1  # no duplicates
