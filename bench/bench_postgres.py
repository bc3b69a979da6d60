"""PostgreSQL vs SQLite in the same run: append, search, projection; then 8 writer processes.

Both stores get the same corpus, the same calls and the same machine; every figure is printed
for both with the ratio (PostgreSQL / SQLite). Then N writer processes (default 8) hit ONE
PostgreSQL schema at once — each appending to its own session and all re-sending one shared,
growing history (as proxies on several hosts would) — and the run checks there is no duplicate
and seq is strictly increasing. Everything lives in a throwaway schema and temp dir.

    python bench/bench_postgres.py [--messages 20000] [--writers 8] [--pg URL]   (~1 min)
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from refold.store import CheckpointDraft, SearchQuery, Store
from refold.store.postgres import PostgresStore
from refold.store.sqlite import SQLiteStore

EN = ["deploy", "server", "database", "migration", "rollback", "latency", "cache", "token", "budget", "summary", "index", "query", "window", "context", "memory", "session", "archive", "compaction", "proxy", "gateway", "error", "retry", "timeout", "config", "schema", "replica", "backup"]
ZH = list("我们需要部署服务器到生产环境数据库迁移回滚延迟缓存预算摘要索引查询窗口上下文记忆会话归档压缩代理网关错误重试超时配置")


def sentence(rng: random.Random) -> str:
    if rng.random() < 0.3:
        return "".join(rng.choice(ZH) for _ in range(rng.randint(8, 40)))
    return " ".join(rng.choice(EN) for _ in range(rng.randint(6, 30)))


def message(rng: random.Random, i: int) -> dict[str, Any]:
    return {"role": "user" if i % 2 == 0 else "assistant", "content": sentence(rng)}


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def timed(fn: Callable[[], object], repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def row(label: str, lite: list[float], pg: list[float]) -> None:
    a50, a95, b50, b95 = pct(lite, .5), pct(lite, .95), pct(pg, .5), pct(pg, .95)
    print(f"{label:<34} sqlite p50 {a50:8.2f} ms p95 {a95:8.2f} | postgres p50 {b50:8.2f} ms "
          f"p95 {b95:8.2f} | ratio p50 {b50 / a50 if a50 else float('nan'):5.2f}x")


def fill(store: Store, total: int, seed: int) -> tuple[float, str]:
    """Bulk-append ``total`` messages over 20 sessions; returns (seconds, a session id)."""
    rng = random.Random(seed)
    sessions = [store.create_session(title=f"bench {i}").id for i in range(20)]
    start = time.perf_counter()
    for start_i in range(0, total, 500):
        sid = sessions[(start_i // 500) % len(sessions)]
        store.append_messages(sid, [message(rng, start_i + k) for k in range(500)])
    return time.perf_counter() - start, sessions[0]


def analyze(url: str, schema: str) -> None:
    """Refresh planner statistics now, as autovacuum would shortly after a bulk load."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'ANALYZE "{schema}".messages')


def bench_pair(lite: Store, pg: Store, pg_url: str, total: int, appends: int) -> None:
    print(f"\n== single-message append (one transaction each, {appends} calls)")
    samples: dict[str, list[float]] = {}
    for name, store in (("sqlite", lite), ("postgres", pg)):
        sid = store.create_session().id
        rng = random.Random(1)
        samples[name] = timed(lambda s=store, i=sid, r=rng: s.append_messages(
            i, [message(r, 0)]), appends)
    row("append 1 message", samples["sqlite"], samples["postgres"])

    print(f"\n== bulk append of {total} messages (batches of 500)")
    seconds = {}
    for name, store in (("sqlite", lite), ("postgres", pg)):
        seconds[name], _ = fill(store, total, 7)
        print(f"{name:<9} {seconds[name]:6.2f} s  {total / seconds[name]:9.0f} msg/s")
    print(f"ratio postgres/sqlite: {seconds['postgres'] / seconds['sqlite']:.2f}x")
    analyze(pg_url, pg.schema)  # type: ignore[attr-defined]

    print("\n== search p50/p95 (limit 20, window 1)")
    for label, text in (("english word", "deploy"), ("english two words", "cache latency"),
                        ("CJK 3+ chars", "数据库"), ("CJK 2 chars", "部署"),
                        ("CJK 1 char", "延")):
        query = SearchQuery(text)
        row(f"search {label!r}", timed(lambda q=query: lite.search(q), 20),
            timed(lambda q=query: pg.search(q), 20))

    print("\n== projection load (checkpoint after N archived rows, 20-row tail)")
    for archived in (1_000, 10_000):
        loads = {}
        for name, store in (("sqlite", lite), ("postgres", pg)):
            sid = store.create_session().id
            rng = random.Random(3)
            for b in range(0, archived + 20, 1000):
                store.append_messages(sid, [message(rng, b + k)
                                            for k in range(min(1000, archived + 20 - b))])
            store.add_checkpoint(sid, CheckpointDraft(summary="s", first_seq=1,
                                                      last_seq=archived,
                                                      tail_start_seq=archived + 1))
            loads[name] = timed(lambda s=store, i=sid: s.projection(i), 30)
        row(f"projection, {archived} archived", loads["sqlite"], loads["postgres"])


def writer(url: str, schema: str, shared: str, history: list[dict[str, Any]], own: int,
           start_at: float) -> tuple[int, float]:
    store = PostgresStore(url, schema=schema, min_size=1, max_size=2)
    try:
        mine = store.create_session().id
        rng = random.Random(own)
        time.sleep(max(0.0, start_at - time.time()))
        start = time.perf_counter()
        writes = 0
        for end in range(1, len(history) + 1):
            store.sync_messages(shared, history[:end])
            store.append_messages(mine, [message(rng, end)])
            writes += 2
        return writes, time.perf_counter() - start
    finally:
        store.close()


def bench_writers(url: str, schema: str, writers: int, turns: int) -> None:
    print(f"\n== {writers} writer processes on one PostgreSQL: each {turns} x (sync of the shared "
          "growing history + append to its own session)")
    store = PostgresStore(url, schema=schema)
    try:
        shared = store.create_session(title="shared").id
        rng = random.Random(11)
        history = [message(rng, i) for i in range(turns)]
        start_at = time.time() + 3
        ctx = multiprocessing.get_context("spawn")
        wall = time.perf_counter()
        with ctx.Pool(writers) as pool:
            results = pool.starmap(writer, [(url, schema, shared, history, w, start_at)
                                            for w in range(writers)])
        wall = time.perf_counter() - wall - max(0.0, start_at - time.time() + 3)
        writes = sum(r[0] for r in results)
        busiest = max(r[1] for r in results)
        stored = store.get_messages(shared, include_inactive=True)
        seqs = [m.seq for m in stored]
        ok = (len(stored) == turns and seqs == list(range(1, turns + 1))
              and [m.message for m in stored] == history)
        own = [m for s in store.list_sessions(limit=writers + 5) if s.id != shared
               for m in store.get_messages(s.id)]
        print(f"calls: {writes} in {busiest:.2f} s (slowest writer) = {writes / busiest:.0f} "
              f"writes/s across {writers} processes")
        print(f"shared session: {len(stored)} rows for {turns} distinct messages; seq strictly "
              f"increasing 1..{turns}: {ok}; own sessions: {len(own)} rows "
              f"(expected {writers * turns})")
        if not ok or len(own) != writers * turns:
            raise SystemExit("FAILED: duplicates or gaps under concurrent writers")
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg", default="postgresql://127.0.0.1:5432/test")
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--appends", type=int, default=300)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--turns", type=int, default=60)
    args = parser.parse_args()
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    with tempfile.TemporaryDirectory() as tmp:
        lite = SQLiteStore(str(Path(tmp) / "bench.db"))
        pg = PostgresStore(args.pg, schema=schema)
        try:
            bench_pair(lite, pg, args.pg, args.messages, args.appends)
            bench_writers(args.pg, f"{schema}_w", args.writers, args.turns)
        finally:
            lite.close()
            pg.drop_schema()
            pg.close()
            cleanup = PostgresStore(args.pg, schema=f"{schema}_w")
            cleanup.drop_schema()
            cleanup.close()


if __name__ == "__main__":
    main()
