"""Compaction benchmarks: CPU vs transcript size, per-turn overhead, tokenizer throughput,
identifier retention, and the estimate's accuracy. Prints figures; asserts nothing.

    python bench/bench_compaction.py            # everything (about a minute on 2 cores)
    python bench/bench_compaction.py --quick    # smaller sizes
    python bench/bench_compaction.py --scaling-only [--replay [DIR]]

The scaling transcript is synthetic (a coding agent's rounds: a prose or code request, a
pytest call, 30 lines of its output); ``--replay`` builds it from real public trajectories
instead (``bench/trajectories.py``: the ones with native tool calls, about 100K tokens, played
one after another, each copy's texts tagged with its run so no output repeats verbatim).

Baselines are measured in the same run (for scaling: one pass reading every message and the
exact token count of the same transcript, and the first size; 100 messages for per-turn
overhead; chars/4 for the estimate) and each figure is printed with its ratio. Scaling is
timed in CPU seconds of this process, so a shared machine slows it less than wall time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from refold.compaction import (
    CompactionGuard,
    CompactionPolicy,
    compact,
    compact_session,
    projection_messages,
)
from refold.messages.model import content_text
from refold.store.sqlite import SQLiteStore
from refold.tokens import (
    ExactCounter,
    chars_per_four,
    estimate_tokens,
    load_encoding,
)

Message = dict[str, Any]

PROSE = ("The deployment failed because the health check timed out; I will retry with a longer "
         "grace period and check the logs of the api service before changing the config. ")
CODE = ("def handler(event, context):\n    items = load(event['path'])\n    return {'count': "
        "len(items), 'ok': True}\n")
CHINESE = "部署失败是因为健康检查超时；我会延长宽限期后重试，并在修改配置之前检查接口服务的日志。"


def agent_round(i: int, output_lines: int = 30) -> list[Message]:
    """One tool round of a synthetic coding agent (about 600 o200k tokens)."""
    command = f"pytest tests/test_mod{i % 50}.py -k case{i}"
    call = {"id": f"call_{i}", "type": "function",
            "function": {"name": "terminal", "arguments": json.dumps({"command": command})}}
    output = "\n".join(f"tests/test_mod{i % 50}.py::case{i}_{k} PASSED [{k}%]"
                       for k in range(output_lines))
    output += "\n1 failed\nexit code 1" if i % 7 == 0 else "\nall passed\nexit code 0"
    text = PROSE if i % 3 else CODE
    return [{"role": "user", "content": f"step {i}: {text}"},
            {"role": "assistant", "content": f"Running case {i}.", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"call_{i}", "content": output},
            {"role": "assistant", "content": f"Case {i} done. " + PROSE}]


def transcript(target_tokens: int, counter: ExactCounter) -> list[Message]:
    msgs: list[Message] = [{"role": "system", "content": "You are a coding agent."}]
    per_round = counter.count_messages(agent_round(1)) - 3
    for i in range(target_tokens // per_round + 1):
        msgs.extend(agent_round(i))
    return msgs


def replayed(target_tokens: int, counter: ExactCounter, root: Path) -> list[Message]:
    """The trajectories with tool calls, one after another until ``target_tokens``."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from trajectories import load_all

    runs = [t.messages for t in load_all(root) if any(m.get("tool_calls") for m in t.messages)]
    msgs: list[Message] = [{"role": "system", "content": "You are a coding agent."}]
    total, k = 0, 0
    while total < target_tokens:
        for m in (m for run in runs for m in run if m["role"] != "system"):
            m = dict(m)
            if isinstance(m.get("content"), str) and m["content"]:
                m["content"] = f"[run {k}] {m['content']}"
            if m.get("tool_calls"):
                m["tool_calls"] = [{**c, "id": f"{c['id']}_{k}"} for c in m["tool_calls"]]
            if m.get("tool_call_id"):
                m["tool_call_id"] = f"{m['tool_call_id']}_{k}"
            msgs.append(m)
            total += counter.count_message(m)
            if total >= target_tokens:
                break
        k += 1
    return msgs


def timed(fn: Callable[[], Any], repeat: int = 1) -> tuple[float, Any]:
    best, value = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        value = fn()
        best = min(best, time.perf_counter() - start)
    return best, value


def cpu_timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """CPU seconds of this process (not wall time: the machine may be shared)."""
    start = time.process_time()
    value = fn()
    return time.process_time() - start, value


def bench_scaling(sizes: list[int], replay: Path | None = None) -> None:
    source = f"replayed trajectories from {replay}" if replay else "synthetic rounds"
    print("\n== compaction CPU vs transcript size (builtin summarizer, o200k, cold caches; "
          f"CPU seconds; {source}) ==")
    print(f"{'tokens':>10} {'messages':>9} {'iterate s':>9} {'count s':>8} {'compact s':>10} "
          f"{'s per 1M':>9} {'x count':>8} {'vs first':>8}  result")
    base_rate = None
    for size in sizes:
        msgs = (replayed(size, ExactCounter("o200k_base"), replay) if replay
                else transcript(size, ExactCounter("o200k_base")))
        counter = ExactCounter("o200k_base")  # fresh: no cached counts
        # the trivial baseline: one pass that reads every message's text
        iterate_s, _ = cpu_timed(lambda m=msgs: sum(len(content_text(x)) for x in m))
        count_s, tokens = cpu_timed(lambda c=counter, m=msgs: c.count_messages(m))
        compact_s, result = cpu_timed(lambda c=counter, m=msgs: compact(
            m, context_length=128_000, counter=c, model="gpt-4o"))
        rate = (count_s + compact_s) / tokens * 1e6  # seconds per million tokens
        base_rate = base_rate or rate
        report = result.report
        print(f"{tokens:>10,} {len(msgs):>9,} {iterate_s:>9.3f} {count_s:>8.3f} "
              f"{compact_s:>10.3f} {rate:>9.3f} {compact_s / count_s:>7.1f}x "
              f"{rate / base_rate:>7.2f}x  {report.status} {report.tokens_after:,} tokens, "
              f"fits={report.fits}")


def _stored(store: SQLiteStore, rounds: int) -> str:
    session = store.create_session(title=f"bench {rounds}", model="gpt-4o")
    msgs: list[Message] = []
    for i in range(rounds):
        msgs.extend(agent_round(i, output_lines=5))
    store.append_messages(session.id, msgs)
    policy = CompactionPolicy(tail_ratio=0.2)
    done = compact_session(store, session.id, context_length=8_000, model="gpt-4o",
                           policy=policy)
    assert done.stored, done.note
    return session.id


def bench_per_turn(iterations: int) -> None:
    print("\n== per-turn overhead: project the stored session + count + decide (SQLite) ==")
    counter = ExactCounter("o200k_base")
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(str(Path(tmp) / "bench.db"))
        try:
            figures = {}
            for rounds in (25, 2_500):  # 100 and 10,000 messages
                sid = _stored(store, rounds)
                guard = CompactionGuard(CompactionPolicy(), context_length=8_000,
                                        model="gpt-4o")

                def turn(sid: str = sid, guard: CompactionGuard = guard) -> bool:
                    view = projection_messages(store.projection(sid), "You are an agent.")
                    return guard.preflight(counter.count_messages(view), exact=True).compact

                turn()  # warm the per-message cache, as a live session is
                samples = []
                for _ in range(iterations):
                    start = time.perf_counter()
                    turn()
                    samples.append(time.perf_counter() - start)
                figures[rounds * 4] = statistics.median(samples) * 1000
                rows = len(store.get_messages(sid))
                tail = len(store.projection(sid).messages)
                print(f"  {rows:>6,} messages in the ledger, {tail} in the projection: "
                      f"{figures[rounds * 4]:.3f} ms median per turn")
            print(f"  ratio 10,000 / 100 messages: {figures[10_000] / figures[100]:.2f} "
                  "(target ≤ 1.2, < 1 ms)")
        finally:
            store.close()


def bench_list_turn(iterations: int) -> None:
    print("\n== per-turn overhead on a plain list (no store): estimate + decide ==")
    figures: dict[tuple[str, int], float] = {}
    for rounds in (25, 2_500):
        msgs = [m for i in range(rounds) for m in agent_round(i, output_lines=5)]
        counter = ExactCounter("o200k_base")
        counter.count_messages(msgs)  # warm
        guard = CompactionGuard(CompactionPolicy(), context_length=10_000_000)
        cached, appended = [], []
        for _ in range(iterations):
            start = time.perf_counter()
            guard.preflight(counter.count_messages(msgs), exact=True)
            cached.append(time.perf_counter() - start)
        total = counter.count_messages(msgs)
        for i in range(iterations * 10):  # a running sum: only the appended message is counted
            message = {"role": "user", "content": f"turn {i}"}
            msgs.append(message)
            start = time.perf_counter()
            total += counter.count_message(message)
            guard.preflight(total, exact=True)
            appended.append(time.perf_counter() - start)
        figures[("cached", rounds * 4)] = statistics.median(cached) * 1000
        figures[("memo", rounds * 4)] = statistics.median(appended) * 1000
        print(f"  {rounds * 4:>6,} messages: full cached count {figures[('cached', rounds * 4)]:.3f}"
              f" ms, running sum (appended message) {figures[('memo', rounds * 4)]:.3f} ms")
    for kind in ("cached", "memo"):
        print(f"  ratio 10,000 / 100 ({kind}): "
              f"{figures[(kind, 10_000)] / figures[(kind, 100)]:.2f}")


def bench_tokenizer(mb: float) -> None:
    print("\n== tokenizer throughput (mixed prose, code, Chinese) ==")
    text = (PROSE * 20 + CODE * 10 + CHINESE * 10)
    text = text * int(mb * 1_000_000 / len(text.encode()) + 1)
    size = len(text.encode()) / 1e6
    est_s, est = timed(lambda: estimate_tokens(text), repeat=2)
    print(f"  {size:.1f} MB of text (the CJK-aware estimate is the baseline)")
    print(f"  {'estimate':<14} {size / est_s:>8.1f} MB/s  {est / est_s / 1e6:>6.2f} M tok/s")
    for name in ("o200k_base", "cl100k_base", "qwen3", "llama3"):
        enc = load_encoding(name)
        secs, n = timed(lambda e=enc: e.count(text), repeat=2)
        print(f"  {name:<14} {size / secs:>8.1f} MB/s  {n / secs / 1e6:>6.2f} M tok/s  "
              f"({est_s / secs:.1f}x faster than the estimate)")
    counter = ExactCounter("o200k_base")
    msgs = [{"role": "user", "content": f"{i} {PROSE}"} for i in range(5_000)]
    cold, _ = timed(lambda: counter.count_messages(msgs))
    warm, _ = timed(lambda: counter.count_messages(msgs), repeat=3)
    print(f"  5,000 messages: cold {cold * 1000:.1f} ms, cached {warm * 1000:.1f} ms "
          f"({cold / warm:.0f}x)")


def _plant(round_msgs: list[Message], i: int, kind: int) -> str:
    """Put one exact identifier where an agent transcript naturally carries that kind."""
    user, call, output, said = round_msgs
    if kind == 0:
        ident = f"/srv/payments/app/handlers/refund_{i}.py"
        user["content"] += f" Look at {ident} first."
    elif kind == 1:
        ident = f"kubectl rollout restart deployment/payments-api-{i} -n prod"
        call["tool_calls"].append({"id": f"call_{i}_k", "type": "function", "function": {
            "name": "terminal", "arguments": json.dumps({"command": ident})}})
        round_msgs.insert(3, {"role": "tool", "tool_call_id": f"call_{i}_k",
                              "content": f"deployment.apps/payments-api-{i} restarted"})
    elif kind == 2:
        ident = f"https://runbooks.internal.example.com/payments/incident-{i}"
        said["content"] += f" The runbook is {ident}."
    elif kind == 3:
        ident = f"ConnectionResetError: [Errno 104] Connection reset by peer 10.4.{i}.7"
        output["content"] += f"\n{ident}"
    elif kind == 4:
        ident = f"v3.{i}.11-rc2"
        user["content"] += f" Pin the client to {ident}."
    elif kind == 5:
        ident = f"{i}47 ms"
        output["content"] += f"\np99 latency {ident}"
    else:
        ident = f"PAY-{i}913"
        user["content"] += f" This is ticket {ident}."
    return ident


def _planted_transcript(rounds: int) -> tuple[list[Message], list[str]]:
    msgs: list[Message] = [{"role": "system", "content": "You are an SRE agent."}]
    planted: list[str] = []
    for i in range(rounds):
        round_msgs = agent_round(i)
        if i % 8 == 4 and i < rounds - 20:  # planted in what will be summarized
            planted.append(_plant(round_msgs, i, (i // 8) % 7))
        msgs.extend(round_msgs)
    return msgs, planted


def bench_retention(rounds: int) -> None:
    print("\n== retention of exact identifiers planted in the summarized span ==")
    msgs, planted = _planted_transcript(rounds)
    counter = ExactCounter("o200k_base")
    result = compact(msgs, context_length=128_000, counter=counter, model="gpt-4o")
    text = "\n".join(content_text(m) + json.dumps(m.get("tool_calls") or [])
                     for m in result.messages)
    kept = [p for p in planted if p in text]
    missing = [p for p in planted if p not in text]
    report = result.report
    print(f"  {report.tokens_before:,} → {report.tokens_after:,} tokens, "
          f"{report.summarized} messages summarized, {len(report.anchors)} anchors")
    print(f"  planted {len(planted)}, kept verbatim {len(kept)}: "
          f"{100 * len(kept) / len(planted):.1f}% (target ≥ 95%)")
    if missing:
        print("  missing:", ", ".join(missing[:8]))
    kinds: dict[str, int] = {}
    for anchor in report.anchors:
        kinds[_kind(anchor)] = kinds.get(_kind(anchor), 0) + 1
    print("  anchor index by shape:", ", ".join(f"{k}×{n}" for k, n in
                                                sorted(kinds.items(), key=lambda kv: -kv[1])[:8]))


def _kind(anchor: str) -> str:
    import re

    return re.sub(r"\d+", "#", anchor)[:40]


def bench_estimate() -> None:
    print("\n== estimate error vs exact (positive = overestimate) ==")
    samples = {"english": PROSE * 5, "code": CODE * 5, "chinese": CHINESE * 5,
               "japanese": "システムプロンプトは決して要約されず、最新のメッセージはそのまま保持されます。" * 5}
    print(f"  {'sample':<9} {'encoding':<12} {'exact':>6} {'estimate':>9} {'chars/4':>8}")
    for label, text in samples.items():
        for name in ("o200k_base", "cl100k_base", "qwen3", "llama3"):
            exact = load_encoding(name).count(text)
            est = estimate_tokens(text) / exact - 1
            naive = chars_per_four(text) / exact - 1
            print(f"  {label:<9} {name:<12} {exact:>6} {est:>+9.0%} {naive:>+8.0%}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--scaling-only", action="store_true",
                        help="only the CPU-vs-size table")
    parser.add_argument("--replay", nargs="?", type=Path, const=Path("/work/data/trajectories"),
                        help="scale real trajectories (bench/trajectories.py) instead")
    args = parser.parse_args()
    sizes = [100_000, 1_000_000] if args.quick else [100_000, 1_000_000, 5_000_000]
    if args.scaling_only:
        bench_scaling(sizes, args.replay)
        return
    bench_estimate()
    bench_tokenizer(2.0 if args.quick else 8.0)
    bench_retention(400)
    bench_retention(1200)
    bench_per_turn(200)
    bench_list_turn(50)
    bench_scaling(sizes, args.replay)


if __name__ == "__main__":
    main()
