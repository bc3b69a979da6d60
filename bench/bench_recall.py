"""What past-session recall adds to a turn: ``prepare`` + ``record`` with recall off, with fts
recall and (with ``refold[embed]``) hybrid recall, same run, same archive, same questions.

The archive is synthetic but shaped like agent work: ``--sessions`` past sessions of
``--per-session`` messages each (services, ports, hosts, errors, a Chinese line now and then).
Each measured turn asks one question about a random past fact in a fresh session, so every
recall search runs over the whole archive (nothing is cached across turns but the process's
vector matrix, as in a long-running ``refold serve``). Reported per turn: median wall time and
median CPU time (``time.process_time``: this process only), and the ratio to recall off.
Hybrid needs every message embedded first; that backfill is timed separately and its archive
can be smaller (``--hybrid-sessions``) since embedding is ~8 ms a message on one core.

    python bench/bench_recall.py                    # ~1 min on a quiet machine
    python bench/bench_recall.py --sessions 2000 --turns 200
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from refold.runtime import Engine
from refold.search.recall import ArchiveRecall
from refold.store import Store, open_store

SERVICES = ["billing", "search", "auth", "gateway", "ledger", "mailer", "reports", "uploads",
            "scheduler", "metrics", "payments", "profiles", "catalog", "checkout", "inventory"]
THINGS = ["database", "cache", "queue", "worker pool", "load balancer", "cron job", "bucket"]
ERRORS = ["timeout", "out of memory", "connection refused", "disk full", "bad certificate",
          "deadlock", "rate limited"]
CHINESE = ["生产服务器的地址变了", "数据库迁移已经完成", "缓存命中率下降了", "部署流水线失败了"]


def fact(rng: random.Random, i: int) -> tuple[str, str]:
    """(a past message, a question it answers)."""
    service, thing = rng.choice(SERVICES), rng.choice(THINGS)
    port, error = 2000 + i % 50_000, rng.choice(ERRORS)
    message = (f"The {service} {thing} runs on host {service}-{i % 97}.internal port {port}; "
               f"last week it failed with {error} and we raised the limit.")
    return message, f"Which port does the {service} {thing} use, and why did it fail?"


def build(store: Store, sessions: int, per_session: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    questions: list[str] = []
    for s in range(sessions):
        session = store.create_session(title=f"work {s}")
        rows: list[dict[str, Any]] = []
        for m in range(per_session):
            if m % 2 == 0:
                message, question = fact(rng, s * per_session + m)
                questions.append(question)
                rows.append({"role": "user", "content": message})
            else:
                text = rng.choice(CHINESE) if m % 7 == 1 else "Noted, I will keep that in mind."
                rows.append({"role": "assistant", "content": text})
        store.append_messages(session.id, rows)
    return questions


def measure(store: Store, recall: ArchiveRecall | None, questions: list[str],
            turns: int) -> dict[str, float]:
    walls: list[float] = []
    cpus: list[float] = []
    recalled = 0
    with Engine(store, model="gpt-4o-mini", context_length=128_000,
                background_precompact=False, recall=recall) as engine:
        for i in range(turns):
            rt = engine.open_session(new=True)
            wall, cpu = time.perf_counter(), time.process_time()
            prepared = rt.prepare([{"role": "user", "content": questions[i % len(questions)]}])
            rt.record({"role": "assistant", "content": "Port noted."},
                      usage={"prompt_tokens": prepared.tokens, "completion_tokens": 3})
            walls.append(time.perf_counter() - wall)
            cpus.append(time.process_time() - cpu)
            recalled += "<recalled-memory>" in str(prepared.messages[-1]["content"])
            rt.close()
    return {"wall_ms": statistics.median(walls) * 1000, "cpu_ms": statistics.median(cpus) * 1000,
            "recalled": recalled / turns}


def row(name: str, result: dict[str, float], base: dict[str, float]) -> str:
    return (f"{name:<16} wall p50 {result['wall_ms']:7.2f} ms ({result['wall_ms'] / base['wall_ms']:5.2f}x)"
            f"   cpu p50 {result['cpu_ms']:7.2f} ms ({result['cpu_ms'] / max(base['cpu_ms'], 1e-6):5.2f}x)"
            f"   turns with a block {result['recalled']:.0%}")


def run(path: Path, sessions: int, args: argparse.Namespace, hybrid: bool) -> None:
    store = open_store(str(path))
    try:
        started = time.perf_counter()
        questions = build(store, sessions, args.per_session, args.seed)
        messages = sessions * args.per_session
        print(f"archive: {sessions} sessions, {messages} messages "
              f"(built in {time.perf_counter() - started:.1f} s)")
        if hybrid:
            from refold.search.indexer import backfill
            from refold.search.vectors import load_embedder

            started = time.perf_counter()
            done = backfill(store, load_embedder(), batch=64)
            took = time.perf_counter() - started
            print(f"embedded {done} messages in {took:.1f} s ({done / took:.0f} messages/s)")
        configs: list[tuple[str, ArchiveRecall | None]] = [
            ("recall off", None), ("recall fts", ArchiveRecall(mode="fts"))]
        if hybrid:
            configs.append(("recall hybrid", ArchiveRecall(mode="hybrid")))
        measure(store, None, questions, 5)  # warm imports, caches and the page cache
        results = {name: measure(store, recall, questions, args.turns)
                   for name, recall in configs}
        base = results["recall off"]
        for name, result in results.items():
            print(row(name, result, base))
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--per-session", type=int, default=10)
    parser.add_argument("--hybrid-sessions", type=int, default=60)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    from refold.search.vectors import embed_available

    with tempfile.TemporaryDirectory() as tmp:
        print("== fts archive")
        run(Path(tmp) / "fts.db", args.sessions, args, hybrid=False)
        if embed_available():
            print("== hybrid archive (refold[embed])")
            run(Path(tmp) / "hybrid.db", args.hybrid_sessions, args, hybrid=True)
        else:
            print("refold[embed] not installed: hybrid recall not measured")


if __name__ == "__main__":
    main()
