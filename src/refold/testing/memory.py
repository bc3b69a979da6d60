"""Test doubles for layer 2: an in-memory ``MemoryBackend`` and two ``MemoryProvider`` fakes.

- ``in_memory_store()`` — a real ``MemoryStore`` (same actions, scan, limits, approval queue)
  whose entries live in a dict: no files, no database.
- ``RecordingProvider`` — a well-behaved external provider that records every hook call.
- ``FailingProvider`` — raises from every hook, to check that a manager isolates it.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from refold.memory.actions import MemoryStore
from refold.memory.backend import Loaded
from refold.messages.model import Message
from refold.store.base import MemoryRow


class InMemoryBackend:
    """``MemoryBackend`` over a dict; a lock stands in for the file lock."""

    def __init__(self) -> None:
        self.rows: dict[str, list[MemoryRow]] = {}
        self.pending: list[dict[str, Any]] = []
        self._lock = threading.RLock()

    def location(self, target: str) -> str:
        return f"memory:{target}"

    def transaction(self, target: str) -> contextlib.AbstractContextManager[None]:
        return _hold(self._lock)

    def load(self, target: str) -> Loaded:
        return Loaded(rows=list(self.rows.get(target, [])), version=None)

    def save(self, target: str, rows: Sequence[MemoryRow], loaded: Loaded) -> None:
        self.rows[target] = list(rows)

    def backup(self, target: str) -> str | None:
        return None

    def adopt(self, target: str) -> None:
        return None

    def pending_transaction(self) -> contextlib.AbstractContextManager[None]:
        return _hold(self._lock)

    def load_pending(self) -> list[dict[str, Any]]:
        return [dict(item) for item in self.pending]

    def save_pending(self, items: Sequence[dict[str, Any]]) -> None:
        self.pending = [dict(item) for item in items]


@contextlib.contextmanager
def _hold(lock: threading.RLock) -> Any:
    with lock:
        yield


def in_memory_store(*, limits: Mapping[str, int] | None = None) -> MemoryStore:
    """A ``MemoryStore`` that keeps everything in this process's memory."""
    return MemoryStore(InMemoryBackend(), limits=limits)


class RecordingProvider:
    """An external memory provider that records calls and offers one tool, ``recall``."""

    def __init__(self, name: str = "recorder", *, calls: list[str] | None = None,
                 tools: Sequence[str] = ("recall",), block: str | None = None) -> None:
        self.name = name
        self.calls = calls if calls is not None else []
        self.tools = list(tools)
        self.block = f"<{name}>external memory</{name}>" if block is None else block
        self.sync_threads: list[str] = []

    def system_prompt_block(self) -> str:
        self.calls.append(f"{self.name}.system_prompt_block")
        return self.block

    def prefetch(self, query: str) -> str:
        self.calls.append(f"{self.name}.prefetch")
        return f"{self.name} recalls {query}"

    def sync_turn(self, messages: Sequence[Message]) -> None:
        self.sync_threads.append(threading.current_thread().name)
        self.calls.append(f"{self.name}.sync_turn:{len(messages)}")

    def on_pre_compress(self, messages: Sequence[Message]) -> str:
        self.calls.append(f"{self.name}.on_pre_compress")
        return f"{self.name} keeps a note"

    def on_session_end(self) -> None:
        self.calls.append(f"{self.name}.on_session_end")

    def tool_schemas(self) -> list[dict[str, Any]]:
        return [{"type": "function",
                 "function": {"name": tool, "description": f"{tool} from {self.name}",
                              "parameters": {"type": "object", "properties": {}}}}
                for tool in self.tools]

    def handle_tool_call(self, name: str, arguments: str | Mapping[str, Any]) -> str:
        self.calls.append(f"{self.name}.tool:{name}")
        return json.dumps({"success": True, "provider": self.name, "tool": name})

    def shutdown(self) -> None:
        self.calls.append(f"{self.name}.shutdown")


class FailingProvider(RecordingProvider):
    """Raises ``RuntimeError`` from every hook (``tool_schemas`` included)."""

    def _fail(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{self.name} is down")

    system_prompt_block = prefetch = sync_turn = on_pre_compress = _fail
    on_session_end = tool_schemas = handle_tool_call = shutdown = _fail
