"""The runtime with the LLM summarizer (scripted server) and with an explicit MemoryManager."""

from __future__ import annotations

from pathlib import Path

from refold.compaction import LLMSummarizer
from refold.llm import HttpChatClient
from refold.memory import open_file_store
from refold.memory.manager import MemoryManager
from refold.memory.provider import BuiltinMemoryProvider
from refold.runtime import Engine
from refold.store import Store
from refold.testing import ScriptedReply, serve

from ._helpers import WINDOW, answer, tool_turn

SYSTEM = "You are a test agent."
BODY = "## Goal\nFix the failing modules.\n## Progress\n### Done\n- modules 0-3 fixed"


def _drive(engine: Engine, turns: int = 14) -> tuple[str, list]:  # type: ignore[type-arg]
    rt = engine.open_session(new=True)
    reports = []
    for i in range(turns):
        prepared = rt.prepare(tool_turn(i, size=250), system_prompt=SYSTEM)
        rt.record(answer(i))
        if prepared.compaction is not None:
            reports.append(prepared.compaction)
    return rt.session_id, reports


def test_llm_summarizer_through_the_runtime(store: Store) -> None:
    with serve(default=lambda _b: ScriptedReply(content=BODY)) as llm, \
            HttpChatClient(llm.base_url) as client:
        summarizer = LLMSummarizer(client, model="summary-model")
        with Engine(store, model="gpt-4o-mini", context_length=WINDOW,
                    summarizer=summarizer) as engine:
            session_id, reports = _drive(engine)
        assert reports and reports[0].summarizer == "llm:summary-model"
        assert llm.llm.requests  # the summary model was really called
        checkpoint = store.latest_checkpoint(session_id)
        assert checkpoint is not None and "modules 0-3 fixed" in checkpoint.summary


def test_llm_summarizer_auth_failure_keeps_the_transcript(store: Store) -> None:
    denied = ScriptedReply(status=401, error={"error": {"message": "bad key"}})
    with serve(default=lambda _b: denied) as llm, HttpChatClient(llm.base_url) as client:
        summarizer = LLMSummarizer(client, model="summary-model")
        with Engine(store, model="gpt-4o-mini", context_length=WINDOW, summarizer=summarizer,
                    background_precompact=False) as engine:
            session_id, reports = _drive(engine)
        assert llm.llm.requests  # a compaction was attempted
    assert reports == []  # aborted: nothing compacted with a made-up summary
    assert store.list_checkpoints(session_id) == []
    assert store.get_session(session_id).message_count == 14 * 4


def test_engine_accepts_a_memory_manager(store: Store, tmp_path: Path) -> None:
    mem_store = open_file_store(tmp_path / "mem")
    mem_store.add("user", "Prefers pytest -q.")
    manager = MemoryManager(BuiltinMemoryProvider(mem_store))
    with Engine(store, model="gpt-4o-mini", context_length=WINDOW, memory=manager) as engine:
        rt = engine.open_session(new=True)
        prepared = rt.prepare([{"role": "user", "content": "hi"}], system_prompt=SYSTEM)
        assert "Prefers pytest -q." in prepared.messages[0]["content"]
