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

``--tool-output CHARS``: the turns are instead one agent conversation through ``/v1/messages``
in Claude Code's shape (``bench_endpoints.py``'s: each reply a tool call, each next request
its CHARS-character result and the whole history), its warm-up another such conversation of
``--turns`` turns: instructions per turn averaged over a history growing to ``--turns`` rounds.
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


def drive_agent(url: str, turns: int, tag: int) -> None:
    """``turns`` turns of one agent conversation through ``/v1/messages`` (bench_endpoints)."""
    import bench_endpoints

    with httpx.Client(timeout=600) as client:
        state: dict[str, Any] = {}
        for turn in range(turns):
            bench_endpoints.agent_turn(client, url, tag, turn, state)


def instructions(src: str, upstream: str, turns: int, stream: bool, streams: int = 1,
                 agent_turns: int = 0) -> int:
    """Callgrind's total for one serve: warm-up, ``turns`` turns, then a dump (with
    ``agent_turns``, a warm-up agent conversation of that many turns, then ``turns`` of
    another)."""
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
            if agent_turns:
                drive_agent(match.group(1), agent_turns, 1)
                if turns:
                    drive_agent(match.group(1), turns, 2)
            else:
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
    parser.add_argument("--tool-output", type=int, default=0, metavar="CHARS",
                        help="an agent conversation through /v1/messages instead, each tool "
                             "result CHARS characters (Claude Code's shape)")
    args = parser.parse_args()
    if args.streams > 1 and args.turns % args.streams:
        raise SystemExit("--turns must be a multiple of --streams")
    reply = ScriptedReply(content=REPLY)
    answer: Any = lambda body: reply  # noqa: E731
    agent = 0
    if args.tool_output > 0:
        import bench_endpoints

        bench_endpoints.TOOL_OUTPUT = args.tool_output
        answer, agent = bench_endpoints.upstream_reply, args.turns
    kind = (f"agent (/v1/messages, {args.tool_output}-char results) turn over {args.turns} "
            "rounds" if agent else
            f"{'JSON' if args.json else 'streamed'} turn at {args.streams} stream(s)")
    with serve(default=answer) as upstream, ThreadPoolExecutor(2) as pool:
        per_turn: list[float] = []
        for src in args.src:
            empty, full = pool.map(lambda n, s=src: instructions(s, upstream.base_url, n,
                                                                 not args.json, args.streams,
                                                                 agent),
                                   (0, args.turns))
            per_turn.append((full - empty) / args.turns)
            print(f"{src}: {per_turn[-1] / 1e6:.3f} M instructions per {kind} "
                  f"({per_turn[-1] / per_turn[0]:.3f}x the first)", flush=True)


if __name__ == "__main__":
    main()
