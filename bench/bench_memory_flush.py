"""Memory flush cost: what a compaction's commit pays for it, and what the flush itself costs.
Prints figures; asserts nothing.

    python bench/bench_memory_flush.py [--messages 2000]

- the commit path: a session compacted with memory flush (queued on the worker) against the same
  session with memory but no reviewer (nothing flushed), CPU seconds of the calling thread;
- the flush itself (on the worker): the deterministic extractor over ``--messages`` stored rows,
  CPU per 1,000 messages, against reading those rows from the store alone (its floor);
- near-duplicate checks: ``near_duplicate`` against a full store (about 30 entries), per call.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from refold.memory import BuiltinMemoryProvider, MemoryManager, open_file_store
from refold.memory.similarity import near_duplicate
from refold.runtime import Engine
from refold.runtime.memory_link import MemoryLink
from refold.store.sqlite import SQLiteStore

WINDOW = 8_000


def _turn(i: int) -> list[dict[str, Any]]:
    said = (f"Remember that staging port is 54{i % 100:02d}." if i % 25 == 0
            else f"step {i}: please run the tests for module {i} and tell me what failed")
    return [{"role": "user", "content": said},
            {"role": "assistant", "content": f"Module {i}: " + "all good. " * 40}]


def commit_path(tmp: Path, with_flush: bool, turns: int) -> tuple[float, int]:
    """Memory on either way; without a reviewer nothing is flushed (the baseline)."""
    store = SQLiteStore(str(tmp / f"commit-{with_flush}.db"), synchronous="NORMAL")
    files = open_file_store(tmp / f"mem-{with_flush}")
    memory = (MemoryLink.for_store(files) if with_flush else
              MemoryLink(MemoryManager(BuiltinMemoryProvider(files), reviewer=None)))
    engine = Engine(store, model="gpt-4o-mini", context_length=WINDOW, memory=memory,
                    background_precompact=False)
    rt = engine.open_session(new=True)
    cpu = 0.0
    for i in range(turns):
        start = time.thread_time()
        rt.prepare(_turn(i)[:1])
        rt.record(_turn(i)[1])
        cpu += time.thread_time() - start
    checkpoints = len(store.list_checkpoints(rt.session_id))
    engine.close()
    store.close()
    return cpu, checkpoints


def flush_cost(tmp: Path, messages: int) -> tuple[float, float]:
    store = SQLiteStore(str(tmp / "flush.db"), synchronous="NORMAL")
    session = store.create_session(title="bench")
    rows = [m for i in range(messages // 2) for m in _turn(i)]
    store.append_messages(session.id, rows)
    start = time.process_time()
    store.get_messages(session.id)
    read = time.process_time() - start
    link = MemoryLink.for_store(open_file_store(tmp / "flush-mem"))
    start = time.process_time()
    link.flush([r.message for r in store.get_messages(session.id)])
    flushed = time.process_time() - start
    store.close()
    return read, flushed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--turns", type=int, default=120)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as raw:
        tmp = Path(raw)
        base, n0 = commit_path(tmp, False, args.turns)
        with_mem, n1 = commit_path(tmp, True, args.turns)
        print(f"commit path, {args.turns} turns: no flush {base:.3f} s CPU "
              f"({n0} checkpoints), flush queued {with_mem:.3f} s CPU "
              f"({n1} checkpoints); ratio {with_mem / base:.2f}")
        read, flushed = flush_cost(tmp, args.messages)
        per_k = 1000 / args.messages
        print(f"flush (extractor) of {args.messages} rows: {flushed * per_k * 1000:.1f} ms CPU "
              f"per 1,000 messages; reading them alone {read * per_k * 1000:.1f} ms "
              f"(ratio {flushed / max(read, 1e-9):.1f})")
    entries = [f"Fact number {i}: service {i} listens on port {8000 + i}" for i in range(30)]
    start = time.process_time()
    for i in range(2000):
        near_duplicate(f"Service {i % 40} listens on port {8000 + i % 40}", entries)
    each = (time.process_time() - start) / 2000
    print(f"near_duplicate against 30 entries: {each * 1e6:.0f} µs per candidate")


if __name__ == "__main__":
    main()
