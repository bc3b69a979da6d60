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


def test_the_snapshot_stays_frozen_in_every_process_that_serves_the_session(
        store: Store, tmp_path: Path) -> None:
    """The snapshot was taken by each process that opened the session: behind ``serve
    --workers 2`` the system prompt flipped between old and new memory from turn to turn,
    and after a restart or a cache eviction it changed mid-session (a provider's prompt cache
    missed every time). It is kept with the session; a new session, and only it, sees the
    change — a compaction child or a branch keeps its conversation's."""
    memories = tmp_path / "memories"

    def system(engine: Engine, ref: str | None = None) -> str:
        rt = engine.open_session(ref) if ref else engine.open_session(new=True)
        sent = rt.prepare([{"role": "user", "content": f"turn in {id(engine)}"}],
                          system_prompt=SYSTEM)
        rt.record({"role": "assistant", "content": "ok"})
        return str(sent.messages[0]["content"])

    with Engine(store, model="gpt-4o-mini", context_length=32_000,
                memory_dir=memories) as first:
        rt = first.open_session(new=True)
        before = system(first, rt.session_id)
        tools = agent_tools(store, session_id=rt.session_id, memory=first.memory)
        assert not tools.run("memory", {"action": "add", "target": "memory",
                                        "content": "The staging database is on port 5433."}
                             ).is_error
        branch = store.fork_session(rt.session_id, kind="branch")
        with Engine(store, model="gpt-4o-mini", context_length=32_000,
                    memory_dir=memories) as second:  # another worker, or the next serve
            assert system(second, rt.session_id) == before
            assert system(second, branch.id) == before
            assert "port 5433" in system(second)  # a new session sees the new memory
        assert system(first, rt.session_id) == before  # and a reopened runtime too


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
