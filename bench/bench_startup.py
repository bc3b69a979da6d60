"""How long a `refold` command takes to start, as a ratio to `python -c pass` in the same run.

Each case runs in a fresh interpreter ``--runs`` times (interleaved, so machine load hits every
case alike); the median wall time is printed with its ratio to the baseline. Cases:
``refold --version``, ``refold --help``, and ``refold search`` on a small archive (the shipped
36-message sample imported into a temporary home). Issue 14's target: --version and the search
under 100 ms.

    python bench/bench_startup.py [--runs 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SAMPLE = Path(__file__).resolve().parents[1] / "src" / "refold" / "data" / "sample_session.jsonl"


def _time(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    home = tempfile.mkdtemp(prefix="refold-bench-startup-")
    env = {**os.environ, "REFOLD_HOME": home}
    env.pop("REFOLD_DB", None)
    refold = [sys.executable, "-m", "refold.cli.main"]
    subprocess.run([*refold, "import", str(SAMPLE)], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    cases = {"python -c pass": [sys.executable, "-c", "pass"],
             "refold --version": [*refold, "--version"],
             "refold --help": [*refold, "--help"],
             "refold search (36 msgs)": [*refold, "search", "currency"]}
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.runs):
        for name, argv in cases.items():
            times[name].append(_time(argv, env))
    base = statistics.median(times["python -c pass"])
    print(f"{'case':<26}{'median ms':>10}{'x pass':>8}   (runs={args.runs}, "
          f"load avg {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:<26}{median * 1000:>10.1f}{median / base:>8.1f}")


if __name__ == "__main__":
    main()
