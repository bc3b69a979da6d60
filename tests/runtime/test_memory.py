"""Memory through the runtime: frozen snapshot per session, tool writes, background review."""

from __future__ import annotations

from pathlib import Path

from refold.runtime import Engine
from refold.store import Store
from refold.tools import agent_tools

SYSTEM = "You are a test agent."


def test_snapshot_frozen_for_the_session_and_fresh_for_the_next(store: Store,
                                                                tmp_path: Path) -> None:
    memories = tmp_path / "memories"
    with Engine(store, model="gpt-4o-mini", context_length=32_000,
                memory_dir=memories) as engine:
        rt = engine.open_session(new=True)
        first = rt.prepare([{"role": "user", "content": "hi"}], system_prompt=SYSTEM)
        rt.record({"role": "assistant", "content": "hello"})
        tools = agent_tools(store, session_id=rt.session_id, memory=engine.memory)
        result = tools.run("memory", {"action": "add", "target": "user",
                                      "content": "用中文回答。Prefers pytest -q."})
        assert not result.is_error
        second = rt.prepare([{"role": "user", "content": "again"}], system_prompt=SYSTEM)
        assert second.messages[0] == first.messages[0]  # byte-identical system prompt
        assert "用中文回答" not in first.messages[0]["content"]
        nxt = engine.open_session(new=True)
        fresh = nxt.prepare([{"role": "user", "content": "new"}], system_prompt=SYSTEM)
        assert fresh.messages[0]["content"].startswith(SYSTEM)
        assert "用中文回答" in fresh.messages[0]["content"]


def test_background_review_saves_stated_preferences(store: Store, tmp_path: Path) -> None:
    memories = tmp_path / "memories"
    engine = Engine(store, model="gpt-4o-mini", context_length=32_000, memory_dir=memories)
    rt = engine.open_session(new=True)
    lines = ["Remember that the staging database listens on port 5433.",
             "I prefer pytest -q over verbose output."] + [f"step {i}" for i in range(10)]
    for text in lines:
        rt.prepare([{"role": "user", "content": text}], system_prompt=SYSTEM)
        rt.record({"role": "assistant", "content": "ok"})
    engine.close()  # joins the review
    saved = "".join(p.read_text(encoding="utf-8") for p in memories.glob("*.md"))
    assert "5433" in saved or "pytest -q" in saved
    # the review never writes to the session ledger
    assert store.get_session(rt.session_id).message_count == 2 * len(lines)
