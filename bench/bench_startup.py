"""How long a `refold` command takes to start, as a ratio to `python -c pass` in the same run.

Each case runs in a fresh interpreter ``--runs`` times (interleaved, so machine load hits every
case alike), with the bytecode cache warm as after an install; the median wall time is printed with its ratio to the baseline, and the median CPU
time (user + system of the child, which load on other cores barely moves). refold runs the way
its console script does (``from refold.cli.main import main; main()``). Cases:
``refold --version``, ``refold --help``, and ``refold search`` on a small archive (the shipped
36-message sample imported into a temporary home). Issue 14's target: --version and the search
under 100 ms.

    python bench/bench_startup.py [--runs 15]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SAMPLE = Path(__file__).resolve().parents[1] / "src" / "refold" / "data" / "sample_session.jsonl"


def _time(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    home = tempfile.mkdtemp(prefix="refold-bench-startup-")
    env = {**os.environ, "REFOLD_HOME": home}
    env.pop("REFOLD_DB", None)
    # bytecode cached as an installed package has it (pip compiles at install time); without
    # this, PYTHONDONTWRITEBYTECODE=1 would make every run compile refold from source
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = os.path.join(home, "pycache")
    refold = [sys.executable, "-c", "from refold.cli.main import main; main()"]
    subprocess.run([*refold, "import", str(SAMPLE)], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    cases = {"python -c pass": [sys.executable, "-c", "pass"],
             "refold --version": [*refold, "--version"],
             "refold --help": [*refold, "--help"],
             "refold search (36 msgs)": [*refold, "search", "currency"]}
    for argv in cases.values():  # warm-up: writes the bytecode cache
        _time(argv, env)
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
    for _ in range(args.runs):
        for name, argv in cases.items():
            times[name].append(_time(argv, env))
    base_wall = statistics.median(w for w, _ in times["python -c pass"])
    base_cpu = statistics.median(c for _, c in times["python -c pass"])
    print(f"{'case':<26}{'wall ms':>9}{'x pass':>8}{'cpu ms':>9}{'x pass':>8}   "
          f"(medians of {args.runs}, load avg {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")
    for name, values in times.items():
        wall = statistics.median(w for w, _ in values)
        cpu = statistics.median(c for _, c in values)
        print(f"{name:<26}{wall * 1000:>9.1f}{wall / base_wall:>8.1f}{cpu * 1000:>9.1f}"
              f"{cpu / base_cpu:>8.1f}")


if __name__ == "__main__":
    main()
