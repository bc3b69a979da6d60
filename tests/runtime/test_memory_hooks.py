"""An external memory provider's hooks through the runtime: recall at turn start (placed in the
current user message, never in the frozen system prompt or the ledger), sync after a turn,
pre-compress before a checkpoint, session end on close — and a failing provider never breaks a
turn."""

from __future__ import annotations

from collections.abc import Sequence

from refold.memory.manager import MemoryManager
from refold.memory.provider import BuiltinMemoryProvider
from refold.messages.model import Message, content_text
from refold.runtime import Engine
from refold.runtime.recall import RECALL_OPEN
from refold.store import Store
from refold.testing.memory import FailingProvider, RecordingProvider, in_memory_store

from ._helpers import WINDOW, answer, tool_turn

SYSTEM = "You are a test agent."


class Keeper(RecordingProvider):
    """Also keeps the messages each ``on_pre_compress`` was shown."""

    def __init__(self) -> None:
        super().__init__("keeper")
        self.compressed: list[list[Message]] = []

    def on_pre_compress(self, messages: Sequence[Message]) -> str:
        self.compressed.append(list(messages))
        return super().on_pre_compress(messages)


def manager_with(external: RecordingProvider | None) -> MemoryManager:
    store = in_memory_store()
    store.add("user", "Prefers pytest -q.")
    manager = MemoryManager(BuiltinMemoryProvider(store))
    if external is not None:
        manager.add_provider(external)
    return manager


def user(text: str) -> Message:
    return {"role": "user", "content": text}


def test_recall_goes_into_the_current_user_message_only(store: Store) -> None:
    provider = RecordingProvider()
    manager = manager_with(provider)
    with Engine(store, model="gpt-4o-mini", context_length=32_000, memory=manager) as engine:
        rt = engine.open_session(new=True)
        first = rt.prepare([user("where is the staging db?")], system_prompt=SYSTEM)
        rt.record({"role": "assistant", "content": "port 5433"})
        manager.flush()  # the prefetch queued at turn start has answered
        second = rt.prepare([user("and the cache?")], system_prompt=SYSTEM)
        call = {"id": "c1", "type": "function", "function": {"name": "t", "arguments": "{}"}}
        rt.record({"role": "assistant", "content": None, "tool_calls": [call]})
        same_turn = rt.prepare([{"role": "tool", "tool_call_id": "c1", "content": "done"}])
        rt.record({"role": "assistant", "content": "redis"})
        manager.flush()
        third = rt.prepare([user("thanks")], system_prompt=SYSTEM)
        stored = [content_text(r.message) for r in store.get_messages(rt.session_id)]
    assert RECALL_OPEN not in content_text(first.messages[-1])  # nothing was ready yet
    recalled = content_text(second.messages[-1])
    assert recalled.startswith("and the cache?") and RECALL_OPEN in recalled
    assert "recorder recalls where is the staging db?" in recalled
    # the system prompt (with the frozen snapshot) is byte-identical all session
    assert first.messages[0] == second.messages[0] == third.messages[0]
    # the whole turn re-sends the same bytes (cache friendly); the next turn moves the block
    assert same_turn.messages[:len(second.messages)] == second.messages
    assert content_text(third.messages[-1]).count(RECALL_OPEN) == 1
    assert "recorder recalls and the cache?" in content_text(third.messages[-1])
    assert third.messages[len(second.messages) - 1] == user("and the cache?")
    assert not any(RECALL_OPEN in text for text in stored)  # never in the ledger
    assert provider.calls.count("recorder.prefetch") == 3


def test_without_an_external_provider_nothing_is_added(store: Store) -> None:
    with Engine(store, model="gpt-4o-mini", context_length=32_000,
                memory=manager_with(None)) as engine:
        rt = engine.open_session(new=True)
        rt.prepare([user("hi")], system_prompt=SYSTEM)
        rt.record({"role": "assistant", "content": "hello"})
        prepared = rt.prepare([user("again")], system_prompt=SYSTEM)
    assert prepared.messages[-1] == user("again")


def test_sync_turn_after_each_completed_turn(store: Store) -> None:
    provider = RecordingProvider()
    manager = manager_with(provider)
    with Engine(store, model="gpt-4o-mini", context_length=32_000, memory=manager) as engine:
        rt = engine.open_session(new=True)
        for i in range(2):
            rt.prepare([user(f"q{i}")], system_prompt=SYSTEM)
            rt.record({"role": "assistant", "content": f"a{i}"})
        manager.flush()
    syncs = [c for c in provider.calls if c.startswith("recorder.sync_turn")]
    assert syncs == ["recorder.sync_turn:2", "recorder.sync_turn:4"]


def test_pre_compress_sees_the_rows_a_checkpoint_replaces(store: Store) -> None:
    provider = Keeper()
    with Engine(store, model="gpt-4o-mini", context_length=WINDOW, memory=manager_with(provider),
                background_precompact=False) as engine:
        rt = engine.open_session(new=True)
        for i in range(12):
            rt.prepare(tool_turn(i), system_prompt=SYSTEM)
            rt.record(answer(i))
        checkpoints = store.list_checkpoints(rt.session_id)
    assert checkpoints and len(provider.compressed) == len(checkpoints)
    first, shown = checkpoints[0], provider.compressed[0]
    rows = store.get_messages(rt.session_id, start_seq=first.first_seq, end_seq=first.last_seq)
    assert shown == [r.message for r in rows]
    assert "step 0: please run the tests for module 0" in content_text(shown[0])


def test_pre_compress_for_a_background_plan(store: Store) -> None:
    provider = Keeper()
    with Engine(store, model="gpt-4o-mini", context_length=WINDOW,
                memory=manager_with(provider)) as engine:
        rt = engine.open_session(new=True)
        for i in range(12):
            rt.prepare(tool_turn(i), system_prompt=SYSTEM)
            rt.record(answer(i))
        checkpoints = store.list_checkpoints(rt.session_id)
        used = rt.precompactor.used
    assert used >= 1 and checkpoints
    assert len(provider.compressed) == len(checkpoints)


def test_session_end_on_close_once_and_for_open_runtimes_at_engine_close(store: Store) -> None:
    provider = RecordingProvider()
    engine = Engine(store, model="gpt-4o-mini", context_length=32_000,
                    memory=manager_with(provider))
    a = engine.open_session(new=True)
    b = engine.open_session(new=True)  # left open: the engine ends it
    a.prepare([user("hi")], system_prompt=SYSTEM)
    a.record({"role": "assistant", "content": "hello"})
    a.close()
    a.close()
    assert provider.calls.count("recorder.on_session_end") == 1
    engine.close()
    assert provider.calls.count("recorder.on_session_end") == 2
    assert provider.calls[-1] == "recorder.shutdown" and b.session_id


def test_a_failing_provider_never_breaks_a_turn(store: Store) -> None:
    manager = manager_with(FailingProvider("down"))
    with Engine(store, model="gpt-4o-mini", context_length=WINDOW, memory=manager,
                background_precompact=False) as engine:
        rt = engine.open_session(new=True)
        for i in range(12):
            prepared = rt.prepare(tool_turn(i), system_prompt=SYSTEM)
            rt.record(answer(i))
            manager.flush()
        assert RECALL_OPEN not in content_text(prepared.messages[-1])
        assert "Prefers pytest -q." in prepared.messages[0]["content"]
        assert store.list_checkpoints(rt.session_id)  # compaction went on
        rt.close()
    assert store.get_session(rt.session_id).message_count == 12 * 4


def test_background_review_counts_each_sessions_own_turns(store: Store) -> None:
    """One engine serves many conversations (``refold serve``): each session's turns count
    toward its own review, so a session is reviewed after its own 10th turn with its own words,
    and another session's turns never start (or shift) its review."""
    from refold.memory.review import MemoryReviewer

    memory = in_memory_store()
    builtin = BuiltinMemoryProvider(memory)
    reviewer = MemoryReviewer(builtin.writer, every_turns=10)
    manager = MemoryManager(builtin, reviewer=reviewer)
    with Engine(store, model="gpt-4o-mini", context_length=32_000, memory=manager,
                background_precompact=False) as engine:
        first, second = engine.open_session(new=True), engine.open_session(new=True)
        for turn in range(1, 10):  # interleaved: 18 turns in all, 9 of each
            first.prepare([user(f"Remember that build {turn} of the API passed.")])
            first.record({"role": "assistant", "content": "Noted."})
            second.prepare([user(f"Question {turn} about the weather?")])
            second.record({"role": "assistant", "content": "Sunny."})
        reviewer.join()
        assert not reviewer.reports  # neither session reached its own 10 turns
        assert reviewer.counts(first.session_id) == (9, 0)
        assert reviewer.counts(second.session_id) == (9, 0)
        first.prepare([user("Remember that the staging database listens on port 5433.")])
        first.record({"role": "assistant", "content": "Noted."})
        reviewer.join()
        assert len(reviewer.reports) == 1  # the first session's 10th turn, its own words
        saved = [e.text for e in memory.read("memory").entries]
        assert any("port 5433" in text for text in saved), saved
        assert not any("weather" in text for text in saved)
        assert reviewer.counts(first.session_id) == (0, 0)
        assert reviewer.counts(second.session_id) == (9, 0)  # untouched by the other's review
