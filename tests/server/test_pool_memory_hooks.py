"""The proxy's session pool ends a session for the memory providers when it evicts its runtime
or shuts down (``SessionRuntime.close`` → ``on_session_end``)."""

from __future__ import annotations

import anyio

from refold.memory.manager import MemoryManager
from refold.memory.provider import BuiltinMemoryProvider
from refold.runtime import Engine
from refold.server.sessions import SessionPool
from refold.store import Store
from refold.testing.memory import RecordingProvider, in_memory_store


def test_eviction_and_shutdown_end_sessions_for_memory_providers(sqlite_store: Store) -> None:
    provider = RecordingProvider()
    manager = MemoryManager(BuiltinMemoryProvider(in_memory_store()))
    manager.add_provider(provider)

    def factory(owner: str) -> Engine:
        return Engine(sqlite_store, model="gpt-4o-mini", context_length=32_000, owner=owner,
                      memory=manager)

    pool = SessionPool(factory, capacity=1)

    async def run() -> None:
        for ref in ("first", "second"):
            async with pool.lock("", ref):
                await pool.runtime("", ref)

    anyio.run(run)
    assert provider.calls.count("recorder.on_session_end") == 1  # "first" was evicted
    pool.close()
    assert provider.calls.count("recorder.on_session_end") == 2  # "second" at shutdown
    assert provider.calls[-1] == "recorder.shutdown"
