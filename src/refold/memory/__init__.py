"""Layer 2 — persistent memory: MEMORY.md / USER.md, frozen snapshots, safety, providers.

Start here: ``open_file_store(dir)`` (or ``DBMemoryStore`` over a refold ``Store``) gives a
``MemoryStore``; ``take_snapshot(store)`` freezes the system-prompt block for a session;
``MemoryWriter`` applies the approval policy; ``MemoryTool`` is the model-facing ``memory`` tool.
"""

from refold.memory.actions import Entry, MemoryStore, MemoryView, WriteResult
from refold.memory.approval import APPROVAL_MODES, MemoryWriter, PendingWrite
from refold.memory.db import DBBackend, DBMemoryStore
from refold.memory.entries import DEFAULT_LIMITS, ENTRY_DELIMITER, TARGETS, Usage
from refold.memory.files import FileBackend, open_file_store
from refold.memory.ops import MemoryOp, make_op
from refold.memory.scan import scan
from refold.memory.snapshot import FrozenSnapshot, take_snapshot
from refold.memory.tool import MemoryTool, memory_tool_schema

__all__ = [
    "APPROVAL_MODES", "DEFAULT_LIMITS", "ENTRY_DELIMITER", "TARGETS", "DBBackend",
    "DBMemoryStore", "Entry", "FileBackend",
    "FrozenSnapshot", "MemoryOp", "MemoryStore", "MemoryTool", "MemoryView", "MemoryWriter",
    "PendingWrite", "Usage", "WriteResult", "make_op", "memory_tool_schema", "open_file_store",
    "scan", "take_snapshot",
]
