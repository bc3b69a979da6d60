"""Embedding off the write path: ``backfill`` for ``refold index``, ``BackgroundIndexer`` for a
long-running process (``refold serve``, ``refold chat``).

Appends never embed. What is still to embed is always "the messages with no vector of this
model" (``Store.unembedded_messages``), so every way of embedding here is resumable and
crash-safe by construction: a batch's vectors land in one write transaction or not at all, a
vector is keyed by (message, model) so nothing is embedded into a duplicate, and an interrupted
run leaves exactly the missing messages for the next one.

``BackgroundIndexer`` runs one daemon thread per store: it waits for a ``nudge`` (the engine
sends one after each finished turn) or a poll interval, then embeds in small batches from a
watermark (the highest id it has seen missing), so an idle pass is an index range scan of new
ids, not an anti-join over the archive. Every ``full_pass_seconds`` (and at start) it passes
from id 0, catching messages that committed out of id order (PostgreSQL sequences) or that
another process skipped. It never holds a lock a turn waits on for longer than one batch's
insert, lowers its own thread's CPU priority where the OS allows, and a failure (the extra
missing, the store closed) stops or pauses it with a log line: the turns never see it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable

import numpy as np

from refold.search.vectors import Embedder, load_embedder
from refold.store.base import Store

log = logging.getLogger(__name__)

BATCH = 32
POLL_SECONDS = 5.0
FULL_PASS_SECONDS = 600.0


def _clean(text: str) -> str:
    return text.encode("utf-8", "replace").decode("utf-8")  # lone surrogates


def embed_batch(store: Store, embedder: Embedder, *, after_id: int = 0,
                limit: int = BATCH) -> tuple[int, int]:
    """Embed up to ``limit`` messages that have no vector, with ids above ``after_id``, oldest
    first. Returns (how many, the last id embedded — ``after_id`` when none)."""
    rows = store.unembedded_messages(embedder.model, after_id=after_id, limit=limit)
    if not rows:
        return 0, after_id
    vectors = embedder.passages([_clean(text) for _, text in rows])
    store.put_vectors(embedder.model, [(i, np.asarray(v).astype(np.float16).tobytes())
                                       for (i, _), v in zip(rows, vectors, strict=True)])
    return len(rows), rows[-1][0]


def backfill(store: Store, embedder: Embedder, *, batch: int = BATCH, limit: int | None = None,
             progress: Callable[[int], None] | None = None,
             stop: Callable[[], bool] | None = None) -> int:
    """Embed every message still missing a vector (at most ``limit``), oldest first; returns
    how many. ``stop()`` true ends it between batches; what is left is embedded next time."""
    done, after = 0, 0
    while (limit is None or done < limit) and not (stop and stop()):
        size = batch if limit is None else min(batch, limit - done)
        count, after = embed_batch(store, embedder, after_id=after, limit=size)
        if not count:
            break
        done += count
        if progress is not None:
            progress(count)
    return done


def missing_count(store: Store, model: str, *, chunk: int = 5000) -> int:
    """How many messages have no ``model`` vector (for a progress bar's length)."""
    total, after = 0, 0
    while rows := store.unembedded_messages(model, after_id=after, limit=chunk):
        total += len(rows)
        after = rows[-1][0]
    return total


def highest_vector_id(store: Store, model: str) -> int:
    """The highest message id with a ``model`` vector (0: none), by galloping on
    ``vectors_after(limit=1)``: O(log n) index seeks, where a "missing" scan from id 0 over a
    fully indexed archive would read every message."""
    def above(x: int) -> int | None:
        rows = store.vectors_after(model, x, limit=1)
        return rows[0][0] if rows else None

    first = above(0)
    if first is None:
        return 0
    low, step = first, 1  # ``low`` has a vector; look for the last one past it
    while (found := above(low + step - 1)) is not None:
        low, step = found, step * 2
    high = low + step - 1  # no vector above ``high``
    while low < high:  # invariant: a vector at ``low``, none above ``high``
        mid = (low + high + 1) // 2
        found = above(mid - 1)
        if found is None:
            high = mid - 1
        else:
            low = found  # (>= mid: ids may be sparse)
    return low


def _lower_priority() -> None:
    """Nice this thread (Linux threads have their own priority); best effort elsewhere."""
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)


class BackgroundIndexer:
    """One store's embedding thread (see the module doc). ``start`` it; ``nudge`` it when
    messages were written; ``close`` it before the store."""

    def __init__(self, store: Store, embedder: Callable[[], Embedder] = load_embedder, *,
                 batch: int = BATCH, poll_seconds: float = POLL_SECONDS,
                 full_pass_seconds: float = FULL_PASS_SECONDS,
                 once_indexed: str | None = None) -> None:
        """``once_indexed``: a model name; the thread then waits (one cheap query a poll, the
        embedder not loaded) until the archive holds a vector of that model — ``refold index``
        ran, perhaps in another process — and indexes from then on."""
        self.store = store
        self.once_indexed = once_indexed
        self._make_embedder = embedder
        self.batch = batch
        self.poll_seconds = poll_seconds
        self.full_pass_seconds = full_pass_seconds
        self.embedded = 0  # messages embedded by this indexer
        self.idle = threading.Event()  # set while caught up (nothing missing at the last look)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> BackgroundIndexer:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="refold-indexer", daemon=True)
            self._thread.start()
        return self

    def nudge(self) -> None:
        """New messages were written: look soon (never waits)."""
        if self.idle.is_set():
            self.idle.clear()
        if not self._wake.is_set():  # (set already: nothing to do; each call takes a lock)
            self._wake.set()

    def close(self, timeout: float = 30.0) -> None:
        """Stop after the batch in flight (its vectors are stored; nothing half-written)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _highest_indexed(self, model: str) -> int:
        try:
            return highest_vector_id(self.store, model)
        except Exception:  # a busy store: the next pass scans from 0 again
            return 0

    def _wait_for_vectors(self, model: str) -> bool:
        """Wait until the store holds a ``model`` vector; False when stopped first. One query
        a poll: a ``nudge`` (this process wrote messages, which brings no vectors) does not
        wake it — under a proxy's load that was one more query per write."""
        while not self._stop.is_set():
            try:
                if self.store.vectors_after(model, 0, limit=1):
                    return True
            except Exception as exc:  # a busy or closing store: look again later
                log.debug("background indexing waits: %s", exc)
            self.idle.set()  # nothing to do until then
            self._stop.wait(self.poll_seconds)
        return False

    def _run(self) -> None:
        _lower_priority()
        if self.once_indexed is not None and not self._wait_for_vectors(self.once_indexed):
            return
        self.idle.clear()
        try:
            embedder = self._make_embedder()
        except Exception as exc:  # the extra is missing or broken: no vectors, no harm
            log.warning("background indexing off: %s", exc)
            return
        watermark, full_at = 0, time.monotonic() + self.full_pass_seconds
        while not self._stop.is_set():
            try:
                count, watermark = embed_batch(self.store, embedder, after_id=watermark,
                                               limit=self.batch)
            except Exception as exc:  # a busy or closing store: try again after a pause
                log.warning("background indexing paused: %s", exc)
                count = 0
            self.embedded += count
            if count:
                continue
            if watermark == 0:  # nothing missing at all: new ids start past the indexed ones
                watermark = self._highest_indexed(embedder.model)
            self.idle.set()
            self._wake.wait(self.poll_seconds)
            self._wake.clear()
            if time.monotonic() >= full_at:  # catch rows that committed out of id order
                watermark, full_at = 0, time.monotonic() + self.full_pass_seconds


__all__ = ["BackgroundIndexer", "backfill", "embed_batch", "missing_count"]
