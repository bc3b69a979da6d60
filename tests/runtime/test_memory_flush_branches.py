"""Memory flush of the sessions a runtime moved to: a runtime placing conversations that open
alike (``diverge="branch"``, as the proxy does for a derived session) goes on in a branch for
each; its end — ``close``, or the engine's when the runtime was dropped without ``close`` — is
the end of every one of them, and until then the idle sweep leaves them to it."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

from refold.runtime import Engine, SessionRuntime
from refold.runtime.memory_flush import EVENT
from refold.store import Store

FACTS = ["Remember that the billing service listens on port 7101.",
         "Remember that the search service listens on port 7202.",
         "Remember that the mailer service listens on port 7303."]


def _texts(memories: Path) -> str:
    return "".join(p.read_text(encoding="utf-8") for p in memories.glob("*.md"))


def _reasons(store: Store, session_id: str) -> list[str]:
    return [e.payload["reason"] for e in store.list_events(session_id, EVENT)]


def _three_branches(rt: SessionRuntime) -> None:
    """Three conversations opening with the same message, their turns interleaved."""
    histories: list[list[dict[str, Any]]] = [
        [{"role": "user", "content": "List the files here"}] for _ in FACTS]
    for step in range(2):
        for history, fact in zip(histories, FACTS, strict=True):
            rt.prepare_history(list(history), diverge="branch")
            rt.record({"role": "assistant", "content": "ok"})
            history += [{"role": "assistant", "content": "ok"},
                        {"role": "user", "content": fact if step == 0 else "thanks"}]


def _family(store: Store) -> list[str]:
    sessions = store.list_sessions(limit=10)
    assert sum(s.link_kind == "branch" for s in sessions) == 2 and len(sessions) == 3
    return [s.id for s in sessions]


def test_closing_a_runtime_flushes_every_session_it_moved_to(store: Store,
                                                            tmp_path: Path) -> None:
    memories = tmp_path / "memories"
    with Engine(store, model="gpt-4o-mini", context_length=32_000,
                memory_dir=memories) as engine:
        rt = engine.open_session(new=True, title="conv-x", source="serve")
        _three_branches(rt)
        ids = _family(store)
        assert engine.flush_idle_sessions(0) == []  # held by a live runtime: left to its end
        rt.close()
        engine.executor.shutdown(wait=True)  # the background flushes the end queued
        assert {sid: _reasons(store, sid) for sid in ids} == \
            {sid: ["session_end"] for sid in ids}
    saved = _texts(memories)
    assert all(f"port {port}" in saved for port in (7101, 7202, 7303)), saved


def test_a_runtime_dropped_without_close_has_every_branch_flushed_by_the_engine(
        store: Store, tmp_path: Path) -> None:
    memories = tmp_path / "memories"
    engine = Engine(store, model="gpt-4o-mini", context_length=32_000, memory_dir=memories)
    rt = engine.open_session(new=True, title="conv-y", source="serve")
    _three_branches(rt)
    ids = _family(store)
    del rt  # the proxy drops a runtime evicted while in use without closing it
    gc.collect()
    engine.close()
    assert {sid: _reasons(store, sid) for sid in ids} == {sid: ["session_end"] for sid in ids}
    saved = _texts(memories)
    assert all(f"port {port}" in saved for port in (7101, 7202, 7303)), saved
