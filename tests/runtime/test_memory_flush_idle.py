"""Idle sessions are flushed for memory (issue 13 item 7, "at session end", for sessions whose
process died before their end): a sweep reviews the unflushed rows of sessions with no new
message for a while, once, leaving sessions open in its own engine, another tenant's, and those
another process is flushing (a lease) alone."""

from __future__ import annotations

from pathlib import Path

from refold.runtime import Engine, SessionRuntime
from refold.runtime.memory_flush import EVENT
from refold.store import Store

SYSTEM = "You are a test agent."
FACT = "Remember that the staging database listens on port 5433."


def _texts(memories: Path) -> str:
    return "".join(p.read_text(encoding="utf-8") for p in memories.glob("*.md"))


def _reasons(store: Store, session_id: str) -> list[object]:
    return [e.payload["reason"] for e in store.list_events(session_id, EVENT)]


def _talk(rt: SessionRuntime, text: str) -> None:
    rt.prepare([{"role": "user", "content": text}], system_prompt=SYSTEM)
    rt.record({"role": "assistant", "content": "ok"})


def _engine(store: Store, memories: Path, owner: str = "") -> Engine:
    return Engine(store, model="gpt-4o-mini", context_length=32_000, memory_dir=memories,
                  owner=owner)


def test_a_session_whose_process_died_is_flushed_once_when_idle(store: Store,
                                                                tmp_path: Path) -> None:
    memories = tmp_path / "memories"
    dead = _engine(store, memories)  # stands for a process that dies: it never closes
    rt = dead.open_session(new=True)
    _talk(rt, FACT)
    sweeper = _engine(store, memories)
    try:
        assert sweeper.flush_idle_sessions(3600) == []  # said just now: not idle
        assert "5433" not in _texts(memories)
        assert sweeper.flush_idle_sessions(0) == [rt.session_id]
        assert "port 5433" in _texts(memories)
        assert _reasons(store, rt.session_id) == ["idle"]
        assert sweeper.flush_idle_sessions(0) == []  # nothing new since
    finally:
        sweeper.close()
        dead.close()  # had it lived to its end: that flush finds nothing left to read
    assert _texts(memories).count("port 5433") == 1
    assert store.get_session(rt.session_id).message_count == 2  # the ledger is untouched


def test_new_messages_after_a_sweep_are_flushed_by_the_next(store: Store,
                                                            tmp_path: Path) -> None:
    memories = tmp_path / "memories"
    first = _engine(store, memories)
    rt = first.open_session(new=True)
    _talk(rt, FACT)
    sweeper = _engine(store, memories)
    try:
        assert sweeper.flush_idle_sessions(0) == [rt.session_id]
        _talk(rt, "Remember that deploys freeze on Fridays.")
        assert sweeper.flush_idle_sessions(0) == [rt.session_id]
        text = _texts(memories)
        assert "port 5433" in text and "Deploys freeze on Fridays" in text
        assert text.count("port 5433") == 1
    finally:
        sweeper.close()
        first.close()


def test_a_session_open_in_the_sweeping_engine_is_left_to_its_own_end(store: Store,
                                                                      tmp_path: Path) -> None:
    memories = tmp_path / "memories"
    engine = _engine(store, memories)
    rt = engine.open_session(new=True)
    _talk(rt, FACT)
    assert engine.flush_idle_sessions(0) == []
    rt.close()
    engine.close()
    assert _reasons(store, rt.session_id) == ["session_end"]
    assert "port 5433" in _texts(memories)


def test_a_sweep_skips_what_another_process_flushes_and_other_tenants(store: Store,
                                                                      tmp_path: Path) -> None:
    memories = tmp_path / "memories"
    dead = _engine(store, memories)
    rt = dead.open_session(new=True)
    _talk(rt, FACT)
    tenant = _engine(store, tmp_path / "tenant-memories", owner="tenant-a")
    other = tenant.open_session(new=True)
    _talk(other, "Remember that tenant A bills monthly.")
    sweeper = _engine(store, memories)
    lease = f"memory-flush:{rt.session_id}"
    try:
        assert store.acquire_lease(lease, "another-process", 300)
        assert sweeper.flush_idle_sessions(0) == []  # held elsewhere; the tenant's is not ours
        store.release_lease(lease, "another-process")
        assert sweeper.flush_idle_sessions(0) == [rt.session_id]
        assert "tenant A bills" not in _texts(memories)
        assert store.acquire_lease(lease, "another-process", 300)  # the sweep let go of it
        store.release_lease(lease, "another-process")
    finally:
        for engine in (sweeper, tenant, dead):
            engine.close()


def test_flush_session_reviews_one_session_idle_or_not(store: Store, tmp_path: Path) -> None:
    memories = tmp_path / "memories"
    first = _engine(store, memories)
    rt = first.open_session(new=True)
    _talk(rt, FACT)
    other = _engine(store, memories)
    try:
        assert other.flush_session(rt.session_id) is True
        assert other.flush_session(rt.session_id) is False  # nothing new
        assert _reasons(store, rt.session_id) == ["requested"]
    finally:
        other.close()
        first.close()
    assert "port 5433" in _texts(memories)


def test_a_long_lived_engine_keeps_no_state_per_session_it_flushed(store: Store,
                                                                   tmp_path: Path) -> None:
    """A proxy sees a new session every request: flushing them must not grow the engine (a
    lock per session did)."""
    from refold.runtime.memory_flush import LOCK_STRIPES

    engine = _engine(store, tmp_path / "memories")
    try:
        for i in range(LOCK_STRIPES * 3):
            rt = engine.open_session(new=True)
            _talk(rt, f"hello {i}")
            rt.close()
        flush = engine._flush
        assert flush is not None
        engine.executor.submit(lambda: None).result()  # queued flushes are done
        sizes = {name: len(value) for name, value in vars(flush).items()
                 if isinstance(value, dict | set | list | tuple)}
        assert sizes and max(sizes.values()) <= LOCK_STRIPES, sizes
    finally:
        engine.close()
