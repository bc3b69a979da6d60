"""Instructions per proxied turn, counted by valgrind (load-independent): checkouts compared.

Wall-clock and /proc CPU figures move with the machine's load; instruction counts do not. For
each ``--src`` (a checkout's ``src``; the first is the baseline) a ``refold serve`` runs under
``valgrind --tool=callgrind`` twice against the same scripted upstream: a warm-up of 40 turns,
then 0 or ``--turns`` more (sequential conversations re-sending their whole history, up to 40
messages, ~20 on average, as ``bench_proxy.py``'s clients do); the difference of the two totals
divided by ``--turns`` is the user-space instructions per turn. Slow (valgrind runs the server
~50x slower): a few minutes per checkout.

    python bench/bench_proxy_instructions.py --src src --src /tmp/old/src [--turns 100] [--json]
                                             [--streams 10]

``--streams N``: the turns come from N clients at once (their turns interleave, as at
``bench_proxy.py``'s 10 streams: busy stores, worker threads and their hand-offs count too).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from refold.testing import ScriptedReply, serve

REPLY = "Sure. Here is a short answer that streams in a few chunks of text."
BANNER = re.compile(r"refold serve: (http://127\.0\.0\.1:\d+/v1)")


def drive(url: str, turns: int, stream: bool, tag: str) -> None:
    with httpx.Client(timeout=600) as client:
        done = conv = 0
        while done < turns:
            history: list[dict[str, Any]] = [
                {"role": "system", "content": "You are a benchmark assistant."},
                {"role": "user", "content": f"[{tag}] conversation {conv}: hello"}]
            conv += 1
            for turn in range(min(20, turns - done)):
                body = {"model": "scripted-model", "messages": history, "stream": stream}
                with client.stream("POST", url + "/chat/completions", json=body) as response:
                    response.raise_for_status()
                    response.read()
                history += [{"role": "assistant", "content": REPLY},
                            {"role": "user", "content": f"follow-up {turn}"}]
                done += 1


def drive_streams(url: str, turns: int, stream: bool, tag: str, streams: int) -> None:
    """``turns`` turns split over ``streams`` clients at once (each its own conversations)."""
    if streams <= 1:
        drive(url, turns, stream, tag)
        return
    with ThreadPoolExecutor(streams) as clients:
        for done in clients.map(lambda i: drive(url, turns // streams, stream, f"{tag}-{i}"),
                                range(streams)):
            del done


def instructions(src: str, upstream: str, turns: int, stream: bool, streams: int = 1) -> int:
    """Callgrind's total for one serve: warm-up, ``turns`` turns, then a dump."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("REFOLD_")}
        env.update(PYTHONPATH=src, PYTHONHASHSEED="0")
        log = Path(tmp, "log")
        out = Path(tmp, "cg.out")
        proc = subprocess.Popen(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable,
             "-m", "refold.cli.main", "--home", str(Path(tmp, "home")), "serve", "--upstream",
             upstream, "--port", "0", "--context-length", "128000"],
            stdout=subprocess.DEVNULL, stderr=log.open("wb"), env=env)
        try:
            deadline = time.monotonic() + 900
            while not (match := BANNER.search(log.read_text(errors="replace"))):
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit(f"serve did not start:\n{log.read_text(errors='replace')}")
                time.sleep(0.2)
            drive(match.group(1), 40, stream, "warm")
            if turns:
                drive_streams(match.group(1), turns, stream, "main", streams)
            time.sleep(2)
            subprocess.run(["callgrind_control", "-d", str(proc.pid)], check=True,
                           stdout=subprocess.DEVNULL)
        finally:
            proc.kill()
            proc.wait()
        return sum(int(line.split()[1]) for dump in Path(tmp).glob("cg.out.*")
                   for line in dump.read_text().splitlines() if line.startswith("totals:"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", action="append", required=True,
                        help="a checkout's src directory (repeat; the first is the baseline)")
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--json", action="store_true", help="non-streaming turns")
    parser.add_argument("--streams", type=int, default=1,
                        help="clients at once (each its own conversations; --turns is split "
                             "evenly over them)")
    args = parser.parse_args()
    if args.streams > 1 and args.turns % args.streams:
        raise SystemExit("--turns must be a multiple of --streams")
    reply = ScriptedReply(content=REPLY)
    with serve(default=lambda body: reply) as upstream, ThreadPoolExecutor(2) as pool:
        per_turn: list[float] = []
        for src in args.src:
            empty, full = pool.map(lambda n, s=src: instructions(s, upstream.base_url, n,
                                                                 not args.json, args.streams),
                                   (0, args.turns))
            per_turn.append((full - empty) / args.turns)
            print(f"{src}: {per_turn[-1] / 1e6:.3f} M instructions per "
                  f"{'JSON' if args.json else 'streamed'} turn at {args.streams} stream(s) "
                  f"({per_turn[-1] / per_turn[0]:.3f}x the first)", flush=True)


if __name__ == "__main__":
    main()
