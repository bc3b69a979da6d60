"""Reference expansion: what ``@file``/``@diff``/``@git`` cost, and what the runtime link adds
to a turn.

1. Expansion of one reference on real files (this repository's own sources, or ``--cwd DIR``),
   against the baseline of only reading the same file (``Path.read_bytes``), same run.
2. Per-turn cost of ``prepare`` + ``record`` on a session whose first message attached a file
   (every later request re-sends that expansion from the memo), against the same session with
   references off, same run, same messages.

    python bench/bench_references.py             # ~15 s
    python bench/bench_references.py --turns 400 --cwd /path/to/a/repo
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from refold.references import local_expander
from refold.runtime import Engine
from refold.store import open_store

REPO = Path(__file__).resolve().parents[1]
FILE = "src/refold/runtime/session.py"


def _median_ms(run: object, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        run()  # type: ignore[operator]
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def bench_expansion(cwd: Path, rounds: int) -> None:
    expander = local_expander(cwd=cwd)
    path = cwd / FILE
    base = _median_ms(path.read_bytes, rounds)
    print(f"baseline: read {FILE} ({path.stat().st_size:,} bytes): {base:.3f} ms")
    for text in (f"@file:{FILE}", f"@file:{FILE}:100-160", "@folder:src/refold", "@diff",
                 "@git:HEAD"):
        ms = _median_ms(lambda t=text: expander.expand(t, context_length=128_000), rounds)
        print(f"{text:40s} {ms:8.3f} ms  ({ms / base:6.1f}x the read)")


def bench_turns(cwd: Path, turns: int) -> None:
    results = {}
    for label, refs in (("off", False), ("on", True)):
        with tempfile.TemporaryDirectory() as tmp:
            store = open_store(str(Path(tmp) / "r.db"), sqlite_synchronous="NORMAL")
            expander = local_expander(store=store, cwd=cwd, spill_dir=Path(tmp) / "spill") \
                if refs else None
            engine = Engine(store, model="gpt-4o", context_length=1_000_000,
                            background_precompact=False, references=expander)
            rt = engine.open_session(new=True)
            times = []
            for turn in range(turns):
                text = f"read @file:{FILE} please" if turn == 0 else f"step {turn}: continue"
                start = time.perf_counter()
                rt.prepare([{"role": "user", "content": text}])
                rt.record({"role": "assistant", "content": f"done with step {turn}"})
                times.append((time.perf_counter() - start) * 1000)
            engine.close()
            store.close()
            later = times[turns // 2:]
            results[label] = (statistics.median(later), sorted(later)[int(len(later) * .95)])
    off, on = results["off"], results["on"]
    print(f"turn (prepare+record), second half of {turns} turns, references off: "
          f"p50 {off[0]:.3f} ms, p95 {off[1]:.3f} ms")
    print(f"                                          references on:  p50 {on[0]:.3f} ms, "
          f"p95 {on[1]:.3f} ms  (p50 ratio {on[0] / off[0]:.2f}x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cwd", type=Path, default=REPO)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--turns", type=int, default=200)
    args = parser.parse_args()
    if not (args.cwd / FILE).is_file():
        raise SystemExit(f"error: {args.cwd / FILE} not found; pass --cwd a refold checkout")
    bench_expansion(args.cwd, args.rounds)
    bench_turns(args.cwd, args.turns)


if __name__ == "__main__":
    main()
