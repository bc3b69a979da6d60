"""Throughput of ``refold serve --workers N``: requests/s, per worker, and the 1 → N scaling.

Same run, same scripted upstream (``refold.testing.serve``, in this process, loopback): for each
worker count, a fresh ``refold serve`` (SQLite ledger in a temp home) gets ``--requests``
non-streamed chat completions from ``--clients`` concurrent clients, each holding its own
conversation and re-sending its whole history (kept to the last ``--window`` messages), on new
connections every ``--per-connection`` requests so the kernel spreads them over the workers.
Worker counts alternate over ``--rounds`` rounds, so a drift in the machine's speed lands on
all of them; the best round per count is kept. Printed: requests/s, requests/s per worker, and
the ratio to one worker. The load generator and the upstream share the machine with the
workers: on a machine with few cores the scaling is bounded by that, not by refold.

    python bench/bench_serve_workers.py [--workers 1,2] [--requests 600] [--clients 8]
                                        [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
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
REPLY = "Sure. Here is a short answer of about the length agents get back from a model."


def start(home: Path, upstream: str, workers: int) -> tuple[subprocess.Popen[bytes], str]:
    home.mkdir(parents=True, exist_ok=True)
    log = home / "serve.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFOLD_")}
    proc = subprocess.Popen([sys.executable, "-m", "refold.cli.main", "--home", str(home),
                             "serve", "--upstream", upstream, "--port", "0",
                             "--workers", str(workers)],
                            stdout=subprocess.DEVNULL, stderr=log.open("wb"), env=env)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        found = BANNER.search(log.read_text(errors="replace"))
        if found:
            url = f"http://127.0.0.1:{found.group(1)}/v1"
            try:
                httpx.get(url + "/models", timeout=30)
                return proc, url
            except httpx.HTTPError:
                pass
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"refold serve did not start:\n{log.read_text(errors='replace')}")


async def client_loop(url: str, name: int, count: int, window: int,
                      per_connection: int) -> None:
    history: list[dict[str, str]] = []
    http = httpx.AsyncClient(timeout=120)
    try:
        for i in range(count):
            if i and i % per_connection == 0:
                await http.aclose()
                http = httpx.AsyncClient(timeout=120)
            history.append({"role": "user", "content": f"client {name} turn {i}: and then?"})
            while len(history) > window or history[0]["role"] != "user":
                history.pop(0)
            answer = await http.post(url + "/chat/completions",
                                     json={"model": "m", "messages": history})
            answer.raise_for_status()
            history.append({"role": "assistant", "content": REPLY})
    finally:
        await http.aclose()


async def load(url: str, requests: int, clients: int, window: int,
               per_connection: int) -> float:
    each = max(1, requests // clients)
    # warm every worker: the first turn of a cold process loads the tokenizer
    await asyncio.gather(*(client_loop(url, -1 - k, 2, window, 1) for k in range(clients)))
    start = time.perf_counter()
    await asyncio.gather(*(client_loop(url, k, each, window, per_connection)
                           for k in range(clients)))
    return each * clients / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--window", type=int, default=20)
    parser.add_argument("--per-connection", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    counts = [int(n) for n in args.workers.split(",")]
    best: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as tmp, \
            serve(default=lambda body: ScriptedReply(content=REPLY)) as up:

        class _Discard(list):
            def append(self, item: object) -> None:
                pass

        up.llm.requests = _Discard()
        up.llm.headers = _Discard()
        for round_ in range(args.rounds):
            for workers in counts:
                proc, url = start(Path(tmp) / f"home-{workers}-{round_}", up.base_url, workers)
                try:
                    rate = asyncio.run(load(url, args.requests, args.clients, args.window,
                                            args.per_connection))
                finally:
                    proc.terminate()
                    proc.wait(60)
                print(f"round {round_ + 1}: {workers} worker(s): {rate:7.1f} requests/s",
                      flush=True)
                best[workers] = max(best.get(workers, 0.0), rate)
    base = best.get(1)
    print(f"\nbest of {args.rounds} rounds, {args.clients} clients, {os.cpu_count()} CPUs:")
    for workers in counts:
        ratio = f", {best[workers] / base:.2f}x one worker" if base else ""
        print(f"  {workers} worker(s): {best[workers]:7.1f} requests/s, "
              f"{best[workers] / workers:7.1f} per worker{ratio}")


if __name__ == "__main__":
    main()
