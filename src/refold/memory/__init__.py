"""Layer 2 — persistent memory: MEMORY.md / USER.md, frozen snapshots, safety, providers.

Start here: ``open_file_store(dir)`` (or ``DBMemoryStore`` over a refold ``Store``) gives a
``MemoryStore``; ``take_snapshot(store)`` freezes the system-prompt block for a session;
``MemoryWriter`` applies the approval policy; ``MemoryTool`` is the model-facing ``memory`` tool;
``MemoryManager.for_store(store, ...)`` runs the builtin provider, background review and at most
one external provider (loaded with ``load_provider(name)`` from the ``refold.memory_providers``
entry-point group).
"""

from refold.memory.actions import Entry, MemoryStore, MemoryView, WriteResult
from refold.memory.approval import APPROVAL_MODES, MemoryWriter, PendingWrite
from refold.memory.db import DBBackend, DBMemoryStore
from refold.memory.entries import DEFAULT_LIMITS, ENTRY_DELIMITER, TARGETS, Usage
from refold.memory.files import FileBackend, open_file_store
from refold.memory.manager import MemoryManager
from refold.memory.ops import MemoryOp, make_op
from refold.memory.provider import (
    BuiltinMemoryProvider,
    MemoryProvider,
    available_providers,
    load_provider,
)
from refold.memory.review import MemoryReviewer, extract_candidates
from refold.memory.scan import scan
from refold.memory.snapshot import FrozenSnapshot, take_snapshot
from refold.memory.tool import MemoryTool, memory_tool_schema

__all__ = [
    "APPROVAL_MODES",
    "DEFAULT_LIMITS",
    "ENTRY_DELIMITER",
    "TARGETS",
    "BuiltinMemoryProvider",
    "DBBackend",
    "DBMemoryStore",
    "Entry",
    "FileBackend",
    "FrozenSnapshot",
    "MemoryManager",
    "MemoryOp",
    "MemoryProvider",
    "MemoryReviewer",
    "MemoryStore",
    "MemoryTool",
    "MemoryView",
    "MemoryWriter",
    "PendingWrite",
    "Usage",
    "WriteResult",
    "available_providers",
    "extract_candidates",
    "load_provider",
    "make_op",
    "memory_tool_schema",
    "open_file_store",
    "scan",
    "take_snapshot",
]
