"""Memory of ``refold serve`` under a steady load: RSS after every ``--step`` requests.

A ``refold serve`` subprocess (``--workers N``, SQLite ledger in a temp home) in front of the
scripted upstream (``refold.testing.serve``, in this process, loopback). Two loads:

- ``distinct``: every request opens a new conversation (a new session each time: the session
  cache fills to its bound and stays there);
- ``long``: one conversation, each request re-sending the whole history plus one new turn (the
  history is kept to the last ``--window`` messages, as a client trimming its context would).

Printed per step: the summed RSS of the serving processes (the workers, or the one process)
from /proc (Linux), and the growth per 1,000 requests over the second half of the run (after
warm-up; ~0 when memory is flat). Also the WAL file's size, which ``wal_limit_bytes`` bounds.

    python bench/bench_serve_memory.py [--load distinct|long] [--requests 3000] [--step 1000]
                                       [--workers 1] [--window 40]
                                       [--set token_cache_entries=2000 ...]

The caches that grow with distinct messages and sessions are LRUs with a bound
(``token_cache_entries``, ``serve_session_cache``): a run long enough to fill them (or one
with small bounds, ``--set``) shows the RSS level off.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from refold.testing import ScriptedReply, serve

BANNER = re.compile(r"http://127\.0\.0\.1:(\d+)/v1")
WORKER = re.compile(r"refold serve: worker (\d+) started")


def start(home: Path, upstream: str, workers: int,
          sets: list[str]) -> tuple[subprocess.Popen[bytes], str, Path]:
    home.mkdir(parents=True, exist_ok=True)
    log = home / "serve.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFOLD_")}
    flags = [arg for pair in sets for arg in ("--set", pair)]
    proc = subprocess.Popen([sys.executable, "-m", "refold.cli.main", "--home", str(home),
                             *flags, "serve", "--upstream", upstream, "--port", "0",
                             "--workers", str(workers)],
                            stdout=subprocess.DEVNULL, stderr=log.open("wb"), env=env)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        found = BANNER.search(log.read_text(errors="replace"))
        if found:
            url = f"http://127.0.0.1:{found.group(1)}/v1"
            try:
                httpx.get(url + "/models", timeout=30)
                return proc, url, log
            except httpx.HTTPError:
                pass
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"refold serve did not start:\n{log.read_text(errors='replace')}")


def rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except FileNotFoundError:
        pass
    return 0.0


def serving_pids(proc: subprocess.Popen[bytes], log: Path, workers: int) -> list[int]:
    if workers == 1:
        return [proc.pid]
    return [int(p) for p in WORKER.findall(log.read_text(errors="replace"))][-workers:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--load", choices=["distinct", "long"], default="distinct")
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--step", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--window", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help="a setting for the server, e.g. token_cache_entries=2000")
    args = parser.parse_args()
    reply = "Fine, noted; here is a short answer of a typical length for an agent turn."
    with tempfile.TemporaryDirectory() as tmp, \
            serve(default=lambda body: ScriptedReply(content=reply)) as up:
        up.llm.requests = _Discard()  # keep the bench's own memory flat
        up.llm.headers = _Discard()
        home = Path(tmp) / "home"
        proc, url, log = start(home, up.base_url, args.workers, args.sets)
        client = httpx.Client(timeout=120)
        history: list[dict[str, str]] = []
        figures: list[tuple[int, float]] = []
        try:
            total = args.warmup + args.requests
            for i in range(total):
                if args.load == "distinct":
                    messages = [{"role": "user", "content": f"conversation {i} opens here"}]
                else:
                    history.append({"role": "user", "content": f"turn {i}: what next?"})
                    history = history[-args.window:] if len(history) > args.window else history
                    while history and history[0]["role"] != "user":
                        history.pop(0)
                    messages = history
                answer = client.post(url + "/chat/completions",
                                     json={"model": "m", "messages": messages})
                answer.raise_for_status()
                if args.load == "long":
                    history.append({"role": "assistant", "content": reply})
                done = i + 1 - args.warmup
                if done >= 0 and done % args.step == 0:
                    rss = sum(rss_mib(p) for p in serving_pids(proc, log, args.workers))
                    wal = home / "refold.db-wal"
                    wal_mib = wal.stat().st_size / 2**20 if wal.exists() else 0.0
                    figures.append((done, rss))
                    print(f"{args.load} after {done:>6} requests: RSS {rss:7.1f} MiB "
                          f"({args.workers} worker(s)), WAL {wal_mib:.2f} MiB", flush=True)
        finally:
            client.close()
            proc.terminate()
            proc.wait(60)
        half = [f for f in figures if f[0] >= args.requests // 2]
        if len(half) >= 2:
            (n0, r0), (n1, r1) = half[0], half[-1]
            print(f"growth over the second half: {1000 * (r1 - r0) / (n1 - n0):+.2f} MiB per "
                  "1,000 requests")


class _Discard(list):
    """A list that keeps nothing (the scripted upstream's request log)."""

    def append(self, item: object) -> None:
        pass


if __name__ == "__main__":
    main()
