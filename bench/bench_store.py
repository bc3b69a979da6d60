"""Print the SQLite store's figures: durable append vs raw insert, bulk import, search, projection.

Run:  python bench/bench_store.py [--messages 1000000] [--cache DIR] [--only append,import,...]

- append: one durable ``append_messages`` (synchronous=FULL, its own transaction) vs a raw
  sqlite3 INSERT of the same row into the same schema (same indexes, FTS triggers, pragmas),
  interleaved in the same run; prints both medians and the ratio (target <= 1.5x).
- import: ``sync_messages`` of a 100k-message history into a fresh session (msgs/s).
- search: p50/p95 over random queries on a DB of ``--messages`` rows (built once into
  ``--cache``, reused after): English words, CJK 3+ characters, CJK 1-2 characters
  (targets < 10 ms, < 10 ms, < 50 ms). Default SearchQuery (limit 20, window 1).
- projection: ``projection()`` of a session with ``--archive`` archived rows before its
  checkpoint vs one with 100 rows, same tail (must not grow with the archive).
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from refold.messages.model import message_identity
from refold.store import CheckpointDraft, SearchQuery
from refold.store.sqlite import SQLiteStore
from refold.store.sqlite.rows import message_columns

SYLLABLES = ["ka", "to", "re", "mi", "lan", "dor", "sel", "vi", "con", "fig", "ser", "ver",
             "dep", "loy", "tra", "ce", "log", "po", "qui", "nex", "bu", "ild", "ar", "ch"]
CJK_CHARS = ("的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能"
             "下过子说产种面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量"
             "都两体制机当使点从业本去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重"
             "新线内数正心反你明看原又么利比或但质气第向道命此变条只没结解问意建月公无系军很情者最立代想已"
             "通并提直题党程展五果料象员革位入常文总次品式活设及管特件长求老头基资边流路级少图山统接知较将"
             "组见计别她手角期根论运农指几九区强放决西被干做必战先回则任取据处队南给色光门即保治北造百规热"
             "领七海口东导器压志世金增争济阶油思术极交受联什认六共权收证改清己美再采转更单风切打白教速花带"
             "安场身车例真务具万每目至达走积示议声报斗完类八离华名确才科张信马节话米整空元况今集温传土许步")


def words(rng: random.Random, n: int) -> list[str]:
    vocab = ["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4))) for _ in range(n)]
    return sorted(set(vocab))


def english(rng: random.Random, vocab: list[str], weights: list[float], n: int = 25) -> str:
    return " ".join(rng.choices(vocab, weights, k=n))


def chinese(rng: random.Random, n: int = 40) -> str:
    return "".join(rng.choice(CJK_CHARS) for _ in range(n))


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return (statistics.median(ordered) * 1000,
            ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))] * 1000)


# -- append ------------------------------------------------------------------------------------
def bench_append(tmp: Path, count: int) -> None:
    store = SQLiteStore(str(tmp / "append.db"))
    session = store.create_session()
    raw_path = tmp / "raw.db"
    SQLiteStore(str(raw_path)).close()  # the same schema, indexes and triggers
    raw = sqlite3.connect(str(raw_path), isolation_level=None)
    for pragma in ("journal_mode=WAL", "synchronous=FULL", "foreign_keys=ON"):
        raw.execute(f"PRAGMA {pragma}")
    raw.execute("INSERT INTO sessions (id, started_at) VALUES ('s', 0)")
    ours: list[float] = []
    base: list[float] = []
    previous = None
    for i in range(count):
        message = {"role": "user", "content": f"append benchmark message number {i} 中文"}
        start = time.perf_counter()
        store.append_messages(session.id, [message])
        ours.append(time.perf_counter() - start)
        start = time.perf_counter()
        previous = message_identity(message, previous)
        role, body, text, tool_call_id, cjk = message_columns(message)
        raw.execute("INSERT INTO messages (session_id, seq, role, message, text, tool_call_id, "
                    "token_count, created_at, active, identity, has_cjk) "
                    "VALUES ('s', ?, ?, ?, ?, ?, NULL, ?, 1, ?, ?)",
                    (i + 1, role, body, text, tool_call_id, time.time(), previous, cjk))
        base.append(time.perf_counter() - start)
    store.close()
    raw.close()
    o50, o95 = percentiles(ours)
    b50, b95 = percentiles(base)
    print(f"append (durable, synchronous=FULL, n={count}): store p50 {o50:.3f} ms p95 {o95:.3f} ms"
          f" | raw INSERT p50 {b50:.3f} ms p95 {b95:.3f} ms | ratio p50 {o50 / b50:.2f}x"
          f" (target <= 1.5x)")


# -- bulk import -------------------------------------------------------------------------------
def bench_import(tmp: Path, count: int) -> None:
    rng = random.Random(7)
    vocab = words(rng, 20000)
    weights = [1 / (i + 1) for i in range(len(vocab))]
    history = [{"role": "user" if i % 2 == 0 else "assistant",
                "content": chinese(rng) if i % 4 == 3 else english(rng, vocab, weights)}
               for i in range(count)]
    store = SQLiteStore(str(tmp / "import.db"))
    session = store.create_session()
    start = time.perf_counter()
    result = store.sync_messages(session.id, history)
    elapsed = time.perf_counter() - start
    start = time.perf_counter()
    again = store.sync_messages(session.id, history)
    resync = time.perf_counter() - start
    proxy = store.create_session()
    turns = history[:1000]
    store.sync_messages(proxy.id, turns)
    samples = []
    for i in range(1000, 1030):  # a proxy re-sends the whole history plus one new message
        turns = history[:i + 1]
        start = time.perf_counter()
        store.sync_messages(proxy.id, turns)
        samples.append(time.perf_counter() - start)
    store.close()
    print(f"bulk import: {len(result.appended)} messages in {elapsed:.2f} s = "
          f"{len(result.appended) / elapsed:,.0f} msgs/s; re-import of the same history "
          f"(skipped {again.skipped}) {resync:.2f} s")
    print(f"proxy-style sync of a ~1000-message history with 1 new message: "
          f"p50 {percentiles(samples)[0]:.2f} ms")


# -- search ------------------------------------------------------------------------------------
def build_corpus(path: Path, total: int) -> None:
    rng = random.Random(42)
    vocab = words(rng, 20000)
    weights = [1 / (i + 1) for i in range(len(vocab))]
    store = SQLiteStore(str(path) + ".part", synchronous="OFF")
    per_session = 1000
    start = time.perf_counter()
    for s in range(max(1, total // per_session)):
        session = store.create_session(source="bench")
        batch = [{"role": "user" if i % 2 == 0 else "assistant",
                  "content": chinese(rng) if rng.random() < 0.3 else english(rng, vocab, weights)}
                 for i in range(per_session)]
        store.append_messages(session.id, batch)
        if s % 100 == 99:
            print(f"  built {(s + 1) * per_session:,} rows, {time.perf_counter() - start:.0f} s",
                  flush=True)
    store.close()
    os.replace(str(path) + ".part", path)
    for suffix in ("-wal", "-shm"):
        Path(str(path) + ".part" + suffix).unlink(missing_ok=True)


def cjk_samples(store: SQLiteStore, rng: random.Random, n: int, sizes: tuple[int, int]
                ) -> list[str]:
    """Substrings of stored CJK messages (so the queries have answers)."""
    top = store.info()["messages"]
    out: list[str] = []
    conn = store.db.conn
    while len(out) < n:
        row = conn.execute("SELECT text FROM messages WHERE id >= ? AND has_cjk = 1 LIMIT 1",
                           (rng.randint(1, top),)).fetchone()
        if row:
            size = rng.randint(*sizes)
            start = rng.randint(0, len(row[0]) - size)
            out.append(row[0][start:start + size])
    return out


def query_sets(store: SQLiteStore, rng: random.Random, n: int) -> dict[str, list[str]]:
    vocab = words(random.Random(42), 20000)
    return {
        "English": [rng.choice(vocab) if rng.random() < 0.6 else
                    f"{rng.choice(vocab)} {rng.choice(vocab[:2000])}" for _ in range(n)],
        "CJK 3+ chars": cjk_samples(store, rng, n, (3, 4)),
        "CJK 1-2 chars": [chinese(rng, rng.randint(1, 2)) for _ in range(n // 2)]
        + cjk_samples(store, rng, n - n // 2, (1, 2)),
        # questions as people type them: stop words around 2-3 content words, one of them
        # from the Zipf head (common) and one from the tail (rare); CJK ones with particles
        "sentence (en)": [rng.choice(QUESTIONS).format(rng.choice(vocab[:500]),
                                                       rng.choice(vocab[2000:]),
                                                       rng.choice(vocab))
                          for _ in range(n)],
        "sentence (zh)": [f"我们什么时候{a}了{b}吗？" for a, b in
                          zip(cjk_samples(store, rng, n, (2, 2)),
                              cjk_samples(store, rng, n, (3, 4)), strict=True)],
    }


QUESTIONS = ["When did we talk about {0} and {1}?", "what was the {1} I mentioned for {0}",
             "Can you remind me how the {0} {1} went?",
             "Where did I put the {0} of the {1} {2}?", "why is {1} so slow"]


def _raw_fts_baseline(store: SQLiteStore, texts: list[str]) -> None:
    """Same run, same sentences: raw sqlite3, the content words ORed, top 20 by FTS5 bm25."""
    from refold.search.query import parse_query

    conn = store.db.conn
    timings = []
    for text in texts:
        plan = parse_query(text).natural
        if plan is None:
            continue
        expr = " OR ".join(t.fts5() for t in plan.words)
        start = time.perf_counter()
        conn.execute("SELECT rowid, rank FROM messages_fts WHERE messages_fts MATCH ? "
                     "ORDER BY rank LIMIT 20", (expr,)).fetchall()
        timings.append(time.perf_counter() - start)
    if timings:
        p50, p95 = percentiles(timings)
        print(f"  baseline, raw sqlite3 FTS5 OR of the same words (top 20 by bm25): "
              f"p50 {p50:6.2f} ms  p95 {p95:6.2f} ms")


def bench_search(cache: Path, total: int, queries: int) -> None:
    path = cache / f"bench-store-{total}.db"
    if not path.exists():
        print(f"building the {total:,}-message search corpus at {path} (once) ...", flush=True)
        build_corpus(path, total)
    store = SQLiteStore(str(path), synchronous="NORMAL")
    print(f"search over {store.info()['messages']:,} messages ({path})")
    targets = {"English": 10, "CJK 3+ chars": 10, "CJK 1-2 chars": 50, "sentence (en)": 10,
               "sentence (zh)": 10}
    for label, texts in query_sets(store, random.Random(1), queries).items():
        for sort in ("relevance", "recency"):
            timings, hits = [], 0
            for text in texts:
                start = time.perf_counter()
                hits += len(store.search(SearchQuery(text, sort=sort)))
                timings.append(time.perf_counter() - start)
            p50, p95 = percentiles(timings)
            print(f"  {label:14} sort={sort:9}: p50 {p50:6.2f} ms  p95 {p95:6.2f} ms  "
                  f"(target < {targets[label]} ms; avg {hits / len(texts):.1f} hits)")
    _raw_fts_baseline(store, query_sets(store, random.Random(1), queries)["sentence (en)"])
    common = words(random.Random(42), 20000)[0]  # the top word of the Zipf vocabulary
    matches = store.db.conn.execute("SELECT count(*) FROM messages_fts WHERE messages_fts "
                                    "MATCH ?", (f'"{common}"',)).fetchone()[0]
    for sort in ("relevance", "recency"):
        timings = []
        for _ in range(30):
            start = time.perf_counter()
            store.search(SearchQuery(common, sort=sort))
            timings.append(time.perf_counter() - start)
        p50, p95 = percentiles(timings)
        print(f"  worst case: the most common word ({matches:,} matching messages) "
              f"sort={sort}: p50 {p50:.2f} ms p95 {p95:.2f} ms")
    store.close()


# -- projection --------------------------------------------------------------------------------
class _RandomEmbedder:
    """Unit vectors from a seeded generator: the scan and fusion cost without the model's."""

    model = "bench-random"
    dim = 384

    def __init__(self) -> None:
        import numpy as np

        self.np = np
        self.rng = np.random.default_rng(7)

    def _unit(self, n: int) -> Any:
        v = self.rng.standard_normal((n, self.dim)).astype("float32")
        return v / self.np.linalg.norm(v, axis=1, keepdims=True)

    def passages(self, texts: list[str]) -> Any:
        return self._unit(len(texts))

    def query(self, text: str) -> Any:
        return self._unit(1)[0]


def bench_hybrid(cache: Path, total: int, queries: int) -> None:
    """Hybrid search at ``total`` messages: random vectors stand in for the model's (the scan,
    fusion and word search are what is timed); the model's own query embedding is timed apart."""
    from refold.search.vectors import VectorIndex, hybrid_search

    path = cache / f"bench-store-{total}.db"
    if not path.exists():
        print(f"building the {total:,}-message search corpus at {path} (once) ...", flush=True)
        build_corpus(path, total)
    store = SQLiteStore(str(path), synchronous="NORMAL")
    index = VectorIndex(store, _RandomEmbedder())
    start = time.perf_counter()
    filled = index.backfill(batch=2000)
    size = os.path.getsize(path)
    print(f"hybrid over {store.info()['messages']:,} messages: {filled:,} vectors stored in "
          f"{time.perf_counter() - start:.1f} s (db now {size / 1e6:.0f} MB)")
    texts = query_sets(store, random.Random(3), queries)["sentence (en)"]
    index.nearest("warm", 1)  # loads the vectors into memory once, as a long-lived process does
    timings = []
    for text in texts:
        start = time.perf_counter()
        hybrid_search(store, SearchQuery(text), mode="hybrid", index=index)
        timings.append(time.perf_counter() - start)
    p50, p95 = percentiles(timings)
    print(f"  hybrid (sentence queries): p50 {p50:.2f} ms  p95 {p95:.2f} ms (target p50 < 50 ms)")
    raw = []  # the same-run baseline: one bare NumPy scan of the same in-memory matrix
    for _ in texts:
        vector = index.embedder.query("")
        start = time.perf_counter()
        (index._matrix @ vector).argmax()
        raw.append(time.perf_counter() - start)
    p50, p95 = percentiles(raw)
    print(f"  baseline, a bare NumPy scan of the same vectors: p50 {p50:.2f} ms  p95 {p95:.2f} ms")
    try:
        from refold.search.vectors import load_embedder

        model = load_embedder()
        model.query("warm up")
        timings = []
        for text in texts[:20]:
            start = time.perf_counter()
            model.query(text)
            timings.append(time.perf_counter() - start)
        p50, p95 = percentiles(timings)
        print(f"  + the model's query embedding ({model.model}): p50 {p50:.2f} ms p95 {p95:.2f} ms")
        start = time.perf_counter()
        vocab = words(random.Random(42), 2000)
        model.passages([english(random.Random(5), vocab, [1.0] * len(vocab)) for _ in range(32)])
        print(f"  embedding throughput: {32 / (time.perf_counter() - start):.1f} messages/s")
    except Exception as exc:  # the extra may be missing: say so, keep the figures above
        print(f"  (model not timed: {exc})")
    store.close()


def bench_projection(tmp: Path, archive: int) -> None:
    store = SQLiteStore(str(tmp / "projection.db"), synchronous="OFF")
    tail = 50

    def session_with(rows: int) -> str:
        session = store.create_session()
        for start in range(0, rows, 5000):
            store.append_messages(session.id, [
                {"role": "user", "content": f"archived row {i} with some words"}
                for i in range(start, min(rows, start + 5000))])
        store.add_checkpoint(session.id, CheckpointDraft("summary", 1, rows - tail,
                                                         rows - tail + 1))
        return session.id

    def timed(fn: Callable[[], Any], n: int = 300) -> float:
        samples = []
        for _ in range(n):
            start = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - start)
        return percentiles(samples)[0]

    small, large = session_with(100), session_with(archive)
    small_ms = timed(lambda: store.projection(small))
    large_ms = timed(lambda: store.projection(large))
    assert len(store.projection(large).messages) == tail
    store.close()
    print(f"projection (tail {tail}): 100 rows p50 {small_ms:.3f} ms | {archive:,} archived rows "
          f"p50 {large_ms:.3f} ms | ratio {large_ms / small_ms:.2f}x (must not grow)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000, help="search corpus rows")
    parser.add_argument("--cache", type=Path,
                        default=Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
                        / "refold-bench")
    parser.add_argument("--appends", type=int, default=500)
    parser.add_argument("--import-messages", type=int, default=100_000)
    parser.add_argument("--hybrid-messages", type=int, default=100_000)
    parser.add_argument("--archive", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--only", default="append,import,projection,search",
                        help="comma-separated sections to run")
    args = parser.parse_args()
    sections = set(args.only.split(","))
    args.cache.mkdir(parents=True, exist_ok=True)
    print(f"SQLite {sqlite3.sqlite_version}")
    with tempfile.TemporaryDirectory(dir=args.cache) as tmp:
        steps: Iterator[tuple[str, Callable[[], None]]] = iter([
            ("append", lambda: bench_append(Path(tmp), args.appends)),
            ("import", lambda: bench_import(Path(tmp), args.import_messages)),
            ("projection", lambda: bench_projection(Path(tmp), args.archive)),
            ("search", lambda: bench_search(args.cache, args.messages, args.queries)),
            ("hybrid", lambda: bench_hybrid(args.cache, args.hybrid_messages, args.queries)),
        ])
        for name, step in steps:
            if name in sections:
                step()


if __name__ == "__main__":
    main()
