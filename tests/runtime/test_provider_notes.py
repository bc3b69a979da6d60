"""What a memory provider returns from ``on_pre_compress`` reaches the stored checkpoint's
summary — on every path to a checkpoint (preflight, background plan, ``/compact``, provider
overflow) — and a failing or silent provider changes nothing but the notes."""

from __future__ import annotations

from collections.abc import Sequence

from refold.compaction import LLMSummarizer
from refold.errors import UpstreamError
from refold.llm import HttpChatClient
from refold.memory.manager import MemoryManager
from refold.memory.provider import BuiltinMemoryProvider
from refold.messages.model import Message
from refold.runtime import Engine
from refold.store import Store
from refold.testing import ScriptedReply, serve
from refold.testing.memory import FailingProvider, RecordingProvider, in_memory_store

from ._helpers import WINDOW, answer, tool_turn

SYSTEM = "You are a test agent."
NOTE = "From memory provider: noter remembers the staging db is db-staging-7"


class Noter(RecordingProvider):
    """Returns a fixed note (or ``text``) from ``on_pre_compress`` and counts the calls."""

    def __init__(self, text: str = "noter remembers the staging db is db-staging-7") -> None:
        super().__init__("noter")
        self.text = text
        self.shown = 0

    def on_pre_compress(self, messages: Sequence[Message]) -> str:
        self.shown += 1
        return self.text


def manager_with(external: RecordingProvider | None) -> MemoryManager:
    manager = MemoryManager(BuiltinMemoryProvider(in_memory_store()))
    if external is not None:
        manager.add_provider(external)
    return manager


def _run(store: Store, provider: RecordingProvider | None, *, background: bool = False,
         turns: int = 12) -> list[str]:
    with Engine(store, model="gpt-4o-mini", context_length=WINDOW,
                memory=manager_with(provider), background_precompact=background) as engine:
        rt = engine.open_session(new=True)
        for i in range(turns):
            rt.prepare(tool_turn(i), system_prompt=SYSTEM)
            rt.record(answer(i))
        if background:
            assert rt.precompactor.used >= 1
        return [c.summary for c in store.list_checkpoints(rt.session_id)]


def test_the_note_is_in_every_checkpoint_summary(store: Store) -> None:
    provider = Noter()
    summaries = _run(store, provider)
    assert summaries and all(NOTE in s for s in summaries)
    assert provider.shown == len(summaries)  # one hook call per checkpoint, none more


def test_the_note_is_kept_for_a_background_plan(store: Store) -> None:
    provider = Noter()
    summaries = _run(store, provider, background=True)
    assert summaries and all(NOTE in s for s in summaries)
    assert provider.shown == len(summaries)


def test_a_failing_provider_compacts_without_notes(store: Store) -> None:
    summaries = _run(store, FailingProvider("down"))
    assert summaries and not any("From memory provider" in s for s in summaries)


class Silent(Noter):
    """No block, no recall, no note: its presence must not change a summary."""

    def __init__(self) -> None:
        super().__init__("")
        self.block = ""

    def prefetch(self, query: str) -> str:
        return ""


def test_a_silent_provider_changes_nothing(store: Store) -> None:
    provider = Silent()
    silent = _run(store, provider)
    assert provider.shown == len(silent)
    plain = _run(store, None)
    assert silent and silent == plain


def test_compact_command_keeps_the_note(store: Store) -> None:
    with Engine(store, model="gpt-4o-mini", context_length=WINDOW,
                memory=manager_with(Noter()), background_precompact=False) as engine:
        rt = engine.open_session(new=True)
        for i in range(3):
            rt.prepare(tool_turn(i), system_prompt=SYSTEM)
            rt.record(answer(i))
        assert not store.list_checkpoints(rt.session_id)
        report = rt.compact()
        assert report is not None and NOTE in (report.summary or "")
        assert NOTE in store.list_checkpoints(rt.session_id)[-1].summary


def test_overflow_compaction_keeps_the_note(store: Store) -> None:
    with Engine(store, model="gpt-4o-mini", context_length=64_000,
                memory=manager_with(Noter()), background_precompact=False) as engine:
        rt = engine.open_session(new=True)
        for i in range(8):
            rt.prepare(tool_turn(i, size=200), system_prompt=SYSTEM)
            rt.record(answer(i))
        assert not store.list_checkpoints(rt.session_id)
        prepared = rt.prepare([{"role": "user", "content": "and now?"}], system_prompt=SYSTEM)
        with serve(max_context_tokens=3_000) as llm, HttpChatClient(llm.base_url) as client:
            try:
                client.complete(prepared.messages, model="m")
                raise AssertionError("the scripted server should reject the request")
            except UpstreamError as exc:
                assert exc.kind == "overflow"
                assert rt.handle_error(exc, 0)
        checkpoints = store.list_checkpoints(rt.session_id)
        assert checkpoints and NOTE in checkpoints[-1].summary


def test_the_llm_summarizer_is_given_the_note(store: Store) -> None:
    def reply(body: dict) -> ScriptedReply:  # type: ignore[type-arg]
        prompt = str(body["messages"][-1]["content"])
        kept = "db-staging-7" if "<provider-notes>" in prompt and "db-staging-7" in prompt \
            else "nothing"
        return ScriptedReply(content=f"## Goal\n- fix modules\n## Critical Context\n- {kept}")

    with serve(default=reply) as llm, HttpChatClient(llm.base_url) as client:
        summarizer = LLMSummarizer(client, model="summary-model")
        with Engine(store, model="gpt-4o-mini", context_length=WINDOW, summarizer=summarizer,
                    memory=manager_with(Noter()), background_precompact=False) as engine:
            rt = engine.open_session(new=True)
            for i in range(12):
                rt.prepare(tool_turn(i), system_prompt=SYSTEM)
                rt.record(answer(i))
        checkpoints = store.list_checkpoints(rt.session_id)
        assert checkpoints and all("- db-staging-7" in c.summary for c in checkpoints)
        assert all(c.summarizer == "llm:summary-model" for c in checkpoints)
        # the rows were found by a builtin probe: the summary model is asked once per checkpoint
        assert len(llm.llm.requests) == len(checkpoints)
