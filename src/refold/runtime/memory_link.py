"""The runtime's link to layer 2: the frozen snapshot, the ``memory`` tool, background review.

``MemoryLink`` wraps what ``refold.memory`` offers for one engine: a ``MemoryStore`` (file-backed
under ``memory_dir`` or given), the model-facing ``MemoryTool`` over it, and — when the memory
layer provides a manager with providers and background review — that manager. The snapshot is
rendered once per session by the caller (``SessionRuntime`` keeps it frozen); writes made
mid-session reach disk at once and show in the next session's snapshot.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from refold.messages.model import Message

log = logging.getLogger(__name__)


class MemoryLink:
    """Snapshot, tool and review hooks over one memory store (and optional manager)."""

    def __init__(self, store: Any, *, manager: Any | None = None,
                 approval: str = "allow") -> None:
        from refold.memory import MemoryTool, MemoryWriter

        self.store = store
        self.manager = manager
        self.tool = MemoryTool(MemoryWriter(store, approval)) if store is not None else None

    @classmethod
    def from_dir(cls, directory: Path, *, approval: str = "allow") -> MemoryLink:
        from refold.memory import open_file_store

        return cls(open_file_store(directory), approval=approval)

    @classmethod
    def wrap(cls, memory: Any) -> MemoryLink:
        """Accept a ``MemoryLink``, a ``MemoryStore`` or a manager exposing ``.store``."""
        from refold.memory import MemoryStore

        if isinstance(memory, MemoryLink):
            return memory
        if isinstance(memory, MemoryStore):
            return cls(memory)
        return cls(getattr(memory, "store", None), manager=memory)

    @property
    def memory_tool(self) -> Any:
        return self.tool

    def snapshot(self) -> str:
        """The system-prompt block as of now (the caller freezes it for a session)."""
        if self.manager is not None and hasattr(self.manager, "system_prompt_block"):
            return str(self.manager.system_prompt_block() or "")
        if self.store is None:
            return ""
        from refold.memory import take_snapshot

        return take_snapshot(self.store).text

    def begin_turn(self) -> None:
        if self.tool is not None:
            self.tool.begin_turn()

    def after_turn(self, messages: Sequence[Message], *, user_turns: int,
                   tool_iterations: int) -> None:
        """Hand a finished turn to the manager's background review, when there is one."""
        if self.manager is None:
            return
        hook = getattr(self.manager, "sync_turn", None)
        if hook is not None:
            hook(list(messages))

    def shutdown(self) -> None:
        if self.manager is not None and hasattr(self.manager, "shutdown"):
            self.manager.shutdown()
