"""The seam between the memory actions and where entries live (files or the refold store).

A backend stores, per target ("memory" / "user"), an ordered list of ``MemoryRow`` (text plus
created/updated metadata) and, per memory directory or profile, the queue of pending (staged)
writes. The actions in ``refold.memory.actions`` are the same for every backend; a backend only
promises:
- ``transaction(target)`` serializes writers where it can (a file lock); inside it ``load`` then
  ``save`` is a read-modify-write;
- ``save`` raises ``Conflict`` when the state moved since ``load`` (compare-and-swap backends);
  the caller reloads and retries;
- ``load`` reports ``drift`` when the stored text was changed by something other than refold;
  ``backup`` keeps a copy of the drifted state and ``adopt`` accepts it as refold's own.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from refold._records import dataclass
from refold.store.base import MemoryRow


@dataclass(frozen=True)
class Loaded:
    """One read of a target: its rows, an opaque version for ``save``, and the drift flag."""

    rows: list[MemoryRow]
    version: Any
    drift: bool = False


class MemoryBackend(Protocol):
    """Where a ``MemoryStore`` keeps its entries and its pending writes."""

    def location(self, target: str) -> str: ...
    def transaction(self, target: str) -> AbstractContextManager[None]: ...
    def load(self, target: str) -> Loaded: ...
    def save(self, target: str, rows: Sequence[MemoryRow], loaded: Loaded) -> None: ...
    def backup(self, target: str) -> str | None: ...
    def adopt(self, target: str) -> None: ...
    def pending_transaction(self) -> AbstractContextManager[None]: ...
    def load_pending(self) -> list[dict[str, Any]]: ...
    def save_pending(self, items: Sequence[dict[str, Any]]) -> None: ...
