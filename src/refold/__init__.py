"""refold — context and memory for LLM agents.

Three layers over one append-only ledger: session context (token-budgeted compaction),
persistent memory (MEMORY.md / USER.md frozen into the system prompt), and an archive with
CJK-correct full-text search, lineage, rewind and export.

    import refold
    store = refold.open("~/.local/share/refold/refold.db")          # layer 3: the ledger
    result = refold.compact(messages, context_length=128_000)       # layer 1: a plain list
    engine = refold.Engine(store, model="gpt-4o", context_length=128_000,
                           memory_dir=Path("memories"))             # all three, per turn
    rt = engine.open_session(new=True)
    prepared = rt.prepare([{"role": "user", "content": "hi"}])
    ...; rt.record(reply_message, usage=usage)

The heavier names (``compact``, ``Engine``, ``MemoryStore``, ...) load on first use, so
``import refold`` stays cheap for a CLI or a store-only caller.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from refold._lazy import lazy_names
from refold.errors import (
    AmbiguousReference,
    CompactionError,
    Conflict,
    ContextOverflowError,
    InvalidInput,
    MemoryError_,
    MessageValidationError,
    NotFound,
    RefoldError,
    StorageError,
    SummarizerError,
    UpstreamError,
)

if TYPE_CHECKING:
    from refold.store import SearchQuery, Store

__version__ = "0.1.0"

# name -> module that defines it; imported on first attribute access (PEP 562)
_LAZY = {
    "SearchQuery": "refold.store",
    "Store": "refold.store",
    "open_store": "refold.store",
    "compact": "refold.compaction",
    "CompactionPolicy": "refold.compaction",
    "CompactionResult": "refold.compaction",
    "BuiltinSummarizer": "refold.compaction",
    "LLMSummarizer": "refold.compaction",
    "Engine": "refold.runtime",
    "SessionRuntime": "refold.runtime",
    "Prepared": "refold.runtime",
    "MemoryStore": "refold.memory",
    "MemoryManager": "refold.memory",
    "open_file_store": "refold.memory",
    "get_counter": "refold.tokens",
    "HttpChatClient": "refold.llm",
    "repair": "refold.messages",
    "validate_messages": "refold.messages",
    "load_messages_file": "refold.messages",
}


__getattr__ = lazy_names(__name__, _LAZY, globals())


def open(target: str | Path) -> Store:  # noqa: A001 - the library's front door
    """Open a store: a SQLite path / ``sqlite:///…`` URL, or ``postgresql://…``."""
    from refold.store import open_store

    path = str(target)
    if "://" not in path and path != ":memory:":
        path = str(Path(path).expanduser())
    return open_store(path)


__all__ = [
    "AmbiguousReference",
    "CompactionError",
    "Conflict",
    "ContextOverflowError",
    "InvalidInput",
    "MemoryError_",
    "MessageValidationError",
    "NotFound",
    "RefoldError",
    "SearchQuery",
    "StorageError",
    "Store",
    "SummarizerError",
    "UpstreamError",
    "__version__",
    "open",
    *_LAZY,
]
