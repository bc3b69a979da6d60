"""refold — context and memory for LLM agents.

Three layers over one append-only ledger: session context (token-budgeted compaction),
persistent memory (MEMORY.md / USER.md frozen into the system prompt), and an archive with
CJK-correct full-text search, lineage, rewind and export.

    import refold
    store = refold.open("~/.local/share/refold/refold.db")
"""

from __future__ import annotations

from pathlib import Path

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
from refold.store import SearchQuery, Store, open_store

__version__ = "0.1.0"


def open(target: str | Path) -> Store:  # noqa: A001 - the library's front door
    """Open a store: a SQLite path / ``sqlite:///…`` URL, or ``postgresql://…``."""
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
]
