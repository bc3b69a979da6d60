"""A first search in a fresh process on a cold page cache, alternating code versions and
archives in the same run: the figure ``refold search`` users see on a large archive, with
what each search reads and spends.

Each variant is ``NAME=DB:SRC[:numpy][:python][:noahead]``: the archive file, the source tree put first
on ``PYTHONPATH`` (the code to measure; an older checkout's ``src`` for a before/after),
``numpy`` to import NumPy first, untimed (a long-running process — ``refold serve``, an MCP
server — has it already), ``python`` to score without the C scorer (``REFOLD_NATIVE=0``:
what an install without a C compiler does), and ``noahead`` to search without asking the OS for
the pages ahead (``REFOLD_READAHEAD=0``, ``store/sqlite/readahead.py``). For each question, each variant runs in a new process that drops
the file's pages from the OS cache (``posix_fadvise(DONTNEED)``), opens the store (untimed)
and times one search; variants alternate question by question, so machine drift hits all
alike. Per variant: wall p50/p95, CPU p50/p95 (process time; of it, system time), and read
syscalls during the search (``/proc/self/io``). ``--cached`` leaves the file in the page cache
(read through once first): the first search's own CPU in a fresh process, without the reads.

    python bench/bench_cold_search.py new=/path/new.db:src old=/path/old.db:/old/checkout/src \\
        [new-np=/path/new.db:src:numpy …] [new-py=/path/new.db:src:python] [--rounds 2]

The questions are the first English questions ``bench_store.py --only search`` asks cold (its
``sentence (en)`` set, the same seed), Chinese ones built as its ``sentence (zh)`` set
(``--chinese``), or the ``--question`` texts given; the archives are
``bench_store.py``'s 1M-message corpus (``--cache``), one copy per code version.
Asserts nothing; prints figures. An archive is migrated when a newer version opens it: give
each version its own copy.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import os, resource, sys, time
path, text, preload, cached = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4] == "1"
if preload:
    import numpy  # noqa: F401
for name in (path, path + "-wal") if not cached else ():
    if os.path.exists(name):
        fd = os.open(name, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
from refold.store.base import SearchQuery
from refold.store.sqlite import SQLiteStore
store = SQLiteStore(path, synchronous="NORMAL")
def reads():
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("syscr"))
r0, u0, c0, t0 = reads(), resource.getrusage(resource.RUSAGE_SELF), time.process_time(), \
    time.perf_counter()
store.search(SearchQuery(text))
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
u1 = resource.getrusage(resource.RUSAGE_SELF)
print(wall * 1e3, cpu * 1e3, (u1.ru_stime - u0.ru_stime) * 1e3, reads() - r0 - 1)
"""


def bench_questions(count: int) -> list[str]:
    """The first ``count`` English questions ``bench_store.py --only search`` asks cold (its
    "sentence (en)" set, drawn with the same seed), without opening a corpus."""
    import random

    sys.path.insert(0, str(Path(__file__).parent))
    from bench_store import english_questions

    return english_questions(random.Random(1), max(count, 60))[:count]


def chinese_questions(db: str, count: int) -> list[str]:
    """Chinese questions as ``bench_store.py`` asks them ("sentence (zh)": a 2-character and
    a 3-4-character substring of stored messages in one sentence), sampled with raw sqlite3
    (opening the store would migrate an older version's copy)."""
    import random
    import sqlite3

    rng = random.Random(1)
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    top = int(conn.execute("SELECT max(id) FROM messages").fetchone()[0])

    def sample(sizes: tuple[int, int]) -> str:
        while True:
            row = conn.execute("SELECT text FROM messages WHERE id >= ? AND has_cjk = 1 "
                               "LIMIT 1", (rng.randint(1, top),)).fetchone()
            if row:
                size = rng.randint(*sizes)
                start = rng.randint(0, max(0, len(row[0]) - size))
                return str(row[0][start:start + size])

    out = [f"我们什么时候{sample((2, 2))}了{sample((3, 4))}吗？" for _ in range(count)]
    conn.close()
    return out


def pct(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("variants", nargs="+", help="NAME=DB:SRC[:numpy][:python][:noahead]")
    parser.add_argument("--question", action="append", default=[],
                        help="a question to ask (repeatable); default: the bench's own")
    parser.add_argument("--questions", type=int, default=10,
                        help="how many of the bench's English questions")
    parser.add_argument("--chinese", action="store_true",
                        help="ask Chinese questions (sampled from the first variant's archive) "
                             "instead of the English ones")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cached", action="store_true",
                        help="leave the file in the page cache (read through once first): the "
                             "first search's own CPU, without the reads")
    args = parser.parse_args()
    variants = []
    for spec in args.variants:
        name, _, rest = spec.partition("=")
        db, src, *more = rest.split(":")
        unknown = set(more) - {"numpy", "python", "noahead"}
        if unknown:
            parser.error(f"unknown variant option(s) {sorted(unknown)} in {spec!r}")
        variants.append((name, db, src, "1" if "numpy" in more else "0",
                         "0" if "python" in more else "1", "0" if "noahead" in more else "1"))
    questions = args.question or (chinese_questions(variants[0][1], args.questions)
                                  if args.chinese else bench_questions(args.questions))
    figures: dict[str, list[list[float]]] = {v[0]: [[], [], [], []] for v in variants}
    if args.cached:
        for db in {v[1] for v in variants}:
            with open(db, "rb") as whole:
                while whole.read(1 << 24):
                    pass
    for _ in range(args.rounds):
        for text in questions:
            for name, db, src, preload, native, ahead in variants:
                env = {**os.environ, "PYTHONPATH": src, "REFOLD_NATIVE": native,
                       "REFOLD_READAHEAD": ahead}
                out = subprocess.run([sys.executable, "-c", CHILD, db, text, preload,
                                      "1" if args.cached else "0"],
                                     capture_output=True, text=True, env=env, check=True)
                for column, value in zip(figures[name], out.stdout.split(), strict=True):
                    column.append(float(value))
    cache = "the file in the page cache" if args.cached else "cold page cache"
    print(f"first search in a fresh process, {cache}; {len(questions)} questions x "
          f"{args.rounds} rounds, variants alternated; ms")
    for name, (wall, cpu, system, reads) in figures.items():
        print(f"{name:>12}: wall p50 {statistics.median(wall):6.1f} p95 {pct(wall, .95):6.1f}"
              f" | CPU p50 {statistics.median(cpu):5.1f} p95 {pct(cpu, .95):5.1f} (system "
              f"{statistics.median(system):4.1f}) | reads p50 {statistics.median(reads):.0f} "
              f"max {max(reads):.0f}")


if __name__ == "__main__":
    main()
