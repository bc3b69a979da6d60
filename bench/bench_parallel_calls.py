"""A turn's cost when the client re-sends parallel tool calls split (OpenAI Codex), same run.

OpenAI Codex records a reply of parallel calls as ``function_call``, its output,
``function_call``, its output, and re-sends them so every turn; refold matches that against the
stored reply (one message with every call). Baseline in the same run: the same conversation
re-sent grouped (one assistant message holding the calls, then their results), as chat clients
send it. Both drive ``SessionRuntime.prepare_history`` + ``record`` directly (the library, in
process, SQLite synchronous=NORMAL as serve runs it), a turn per tool round, each round two calls
with ~800-character outputs. Prints the p50 and mean of a turn at the end of the conversation
and the ratio split / grouped.

    python bench/bench_parallel_calls.py [--turns 60] [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from typing import Any

from refold.runtime import Engine
from refold.store.sqlite import SQLiteStore


def call(n: int) -> dict[str, Any]:
    return {"id": f"call_{n}", "type": "function",
            "function": {"name": "shell", "arguments": f'{{"command": ["ls", "-la", "src/{n}"]}}'}}


def conversation(split: bool, turns: int) -> tuple[list[float], int]:
    """Seconds of each turn (prepare + record) and the history's final length."""
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(tmp + "/refold.db", synchronous="NORMAL")
        engine = Engine(store, model="gpt-4o-mini", context_length=1_000_000,
                        background_precompact=False)
        try:
            rt = engine.open_session(new=True)
            history: list[dict[str, Any]] = [{"role": "user", "content": "fix the failing test"}]
            times = []
            for turn in range(turns):
                a, b = 2 * turn, 2 * turn + 1
                start = time.perf_counter()
                rt.prepare_history(history)
                rt.record({"role": "assistant", "content": None, "tool_calls": [call(a), call(b)]})
                times.append(time.perf_counter() - start)
                out = [{"role": "tool", "tool_call_id": f"call_{n}",
                        "content": f"output of call {n}: " + "x" * 800} for n in (a, b)]
                if split:
                    history += [{"role": "assistant", "content": None, "tool_calls": [call(a)]},
                                out[0],
                                {"role": "assistant", "content": None, "tool_calls": [call(b)]},
                                out[1]]
                else:
                    history += [{"role": "assistant", "content": None,
                                 "tool_calls": [call(a), call(b)]}, *out]
            return times, len(history)
        finally:
            engine.close()
            store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=60)
    parser.add_argument("--runs", type=int, default=3, help="alternating grouped/split runs")
    args = parser.parse_args()
    tail = max(1, args.turns // 6)
    found: dict[str, list[float]] = {"grouped": [], "split": []}
    sizes: dict[str, int] = {}
    for _ in range(args.runs):
        for kind in ("grouped", "split"):
            times, size = conversation(kind == "split", args.turns)
            found[kind] += times[-tail:]
            sizes[kind] = size
    for kind, times in found.items():
        print(f"{kind:>8}: {sizes[kind]} messages at the end; a turn of the last {tail}: "
              f"p50 {statistics.median(times) * 1000:.2f} ms, "
              f"mean {statistics.mean(times) * 1000:.2f} ms")
    ratio = statistics.median(found["split"]) / statistics.median(found["grouped"])
    print(f"split / grouped, p50: {ratio:.2f}x")


if __name__ == "__main__":
    main()
