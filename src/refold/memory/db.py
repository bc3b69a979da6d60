"""The DB backend: memory rows in the refold store, keyed by profile, for several hosts.

Each (profile, target) is one versioned document in the store (``Store.memory_load`` /
``memory_save``, SQLite or PostgreSQL). Writes are compare-and-swap: ``save`` passes the version
``load`` saw; when another host wrote in between, the store raises ``Conflict`` and the
``MemoryStore`` reloads, re-applies the operations to the fresh rows and retries — so no write is
lost and none clobbers another. The pending (staged) queue is the document ``(profile,
"pending")`` with one JSON row per staged write, under the same compare-and-swap.

Nothing edits the rows outside refold, so there is no drift: ``backup`` and ``adopt`` are no-ops.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from refold.errors import Conflict
from refold.memory.actions import MemoryStore
from refold.memory.backend import Loaded
from refold.memory.entries import FILENAMES, check_target, dedupe_rows
from refold.store.base import MemoryRow, Store
from refold.store.urls import redact_url

PENDING_TARGET = "pending"



@contextlib.contextmanager
def _locked(lock: threading.Lock) -> Iterator[None]:
    with lock:
        yield


class DBBackend:
    """``MemoryBackend`` over a refold ``Store``'s memory documents."""

    def __init__(self, store: Store, profile: str = "default") -> None:
        self.store = store
        self.profile = profile
        self._pending_version = 0
        self._pending_lock = threading.Lock()  # the version above is per-process state

    def location(self, target: str) -> str:
        return f"{redact_url(self.store.url)} (profile {self.profile!r}, {FILENAMES[target]})"

    def transaction(self, target: str) -> contextlib.AbstractContextManager[None]:
        check_target(target)
        return contextlib.nullcontext()

    def load(self, target: str) -> Loaded:
        rows, version = self.store.memory_load(self.profile, check_target(target))
        return Loaded(rows=dedupe_rows(rows), version=version)

    def save(self, target: str, rows: Sequence[MemoryRow], loaded: Loaded) -> None:
        try:
            self.store.memory_save(self.profile, target, list(rows), int(loaded.version))
        except Conflict as exc:
            raise Conflict(exc.message, hint="reload and retry", retry=True) from exc

    def backup(self, target: str) -> str | None:
        return None

    def adopt(self, target: str) -> None:
        return None

    # -- pending writes ---------------------------------------------------------------------
    def pending_transaction(self) -> contextlib.AbstractContextManager[None]:
        return _locked(self._pending_lock)

    def load_pending(self) -> list[dict[str, Any]]:
        rows, self._pending_version = self.store.memory_load(self.profile, PENDING_TARGET)
        items = []
        for row in rows:
            try:
                item = json.loads(row.text)
            except ValueError:
                continue
            if isinstance(item, dict):
                items.append(item)
        return items

    def save_pending(self, items: Sequence[dict[str, Any]]) -> None:
        now = time.time()
        rows = [MemoryRow(text=json.dumps(item, ensure_ascii=False, sort_keys=True),
                          created_at=float(item.get("created_at") or now), updated_at=now)
                for item in items]
        try:
            self._pending_version = self.store.memory_save(self.profile, PENDING_TARGET, rows,
                                                           self._pending_version)
        except Conflict as exc:
            raise Conflict(exc.message, hint="retry", retry=True) from exc


class DBMemoryStore(MemoryStore):
    """A ``MemoryStore`` whose entries live in the refold store under ``profile``."""

    def __init__(self, store: Store, profile: str = "default", *,
                 limits: Mapping[str, int] | None = None) -> None:
        super().__init__(DBBackend(store, profile), limits=limits)
