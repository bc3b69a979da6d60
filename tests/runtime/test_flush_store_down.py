"""When the store is unreachable (a PostgreSQL database dropped under a serve), each session's
end-of-session memory flush waited out the pool's timeout: a serve with 80 sessions took
minutes to stop. After one flush finds the store down, the others are left to a later idle
sweep for ``STORE_DOWN_SECONDS``."""

from __future__ import annotations

from typing import Any

from refold.errors import StorageError
from refold.runtime import memory_flush
from refold.runtime.memory_flush import MemoryFlush


class _Down:
    """A store every read of which fails as an unreachable database does."""

    def __init__(self) -> None:
        self.reads = 0

    def __getattr__(self, name: str) -> Any:
        def fail(*_args: Any, **_kw: Any) -> Any:
            self.reads += 1
            raise StorageError("cannot connect to PostgreSQL: database x does not exist")
        return fail


def test_one_unreachable_store_pauses_the_other_flushes(monkeypatch: Any) -> None:
    store = _Down()
    flush = MemoryFlush(store, link=None, executor=None)  # type: ignore[arg-type]
    for n in range(5):
        flush._run(f"s{n}", None, "session_end")
    assert store.reads == 1  # the first found it down; the other four waited for nothing
    monkeypatch.setattr(memory_flush.time, "monotonic",
                        lambda: flush._store_down_until + 1)  # the pause is over
    flush._run("s5", None, "session_end")
    assert store.reads == 2
