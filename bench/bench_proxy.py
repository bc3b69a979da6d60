"""Added latency of ``refold serve``: streams through the proxy vs straight to the upstream.

Same run, same machine, same scripted upstream (``refold.testing.serve``, loopback only): at
each concurrency level N, N clients each hold one conversation and stream ``turns`` turns,
re-sending the whole history every turn as agents do. Measured per request: time to the first
content byte (TTFB) and to ``data: [DONE]`` (total), directly and through a ``refold serve``
subprocess (SQLite ledger in a temp home, every message stored, usage recorded; serve's default
``serve_sqlite_synchronous=NORMAL``). The proxy's added latency is reported as proxy percentile −
direct percentile; the proxy process's CPU time per request is read from /proc (Linux). Direct
and proxied runs alternate in ``--rounds`` rounds per level, so a drift in the machine's speed
lands on both sides. Loops are bounded; the whole bench takes a minute or two.

Variants in the same run (``--variants``, each its own ``refold serve``, alternating with the
direct runs): ``new`` (this checkout, the lean h1 upstream client), ``httpx`` (this checkout with
the httpx transport: is the lean client worth its code?), ``asyncio`` (this checkout on
asyncio's own event loop even where uvloop is installed, as ``refold[server]`` alone runs), ``old`` (the checkout at ``--old-src``,
e.g. ``git archive 0d24073 src | tar -x -C /tmp/old`` then ``--old-src /tmp/old/src``),
``floor`` (``bench/proxy_floor.py``: the same uvicorn and h1 client forwarding the bytes unread,
no JSON, no ledger: the stack's own cost, below which no change to refold can go),
``ledger-floor`` (``bench/proxy_ledger_floor.py``: the floor plus the least a recording proxy
must do, plainly: JSON decode and re-encode of the body, raw sqlite3 inserts of the new
messages and of the assembled reply in two WAL commits, SSE events decoded; the gap to ``new``
is refold's own work beyond that). Each
client re-sends its whole history (2 to 40 messages, ~20 on average). Per variant: added latency
(percentiles of proxy minus direct), the proxy process's CPU per request (/proc), and requests/s
per worker (requests ÷ wall time of the variant's runs at that level).

    python bench/bench_proxy.py [--levels 1,10] [--requests 400] [--rounds 4]
                                [--variants new,httpx,old --old-src /tmp/old/src]
                                [--proxy-cpus 1] [--json] [--reply-chars 3200]

``--json`` runs non-streaming turns (the reply as one JSON body) instead of streams.
``--window N``: each client sends its system message and only its last N messages, as agents
that trim their history do, over conversations of 60 turns (every turn past the first N/2 a
slid window: the proxy finds the session the window continues). ``ledger-floor`` assumes a
re-sent history extends what it stored, so it has no meaning with ``--window``.
``--reply-chars N`` makes the scripted reply N characters long (16 a chunk): what a
long streamed answer costs per chunk.

``--proxy-cpus`` pins the proxy to its own CPUs and the load generator with the scripted
upstream to the rest (Linux), as in a deployment where the model runs elsewhere: the added
latency is then the proxy's own work, not its competition with the load for cores.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from refold.testing import ScriptedReply, serve

REPLY = "Sure. Here is a short answer that streams in a few chunks of text."
MAX_TURNS = 20
BANNER = re.compile(r"http://127\.0\.0\.1:(\d+)/v1")


# runs refold's CLI with uvicorn on asyncio's own event loop even where uvloop is installed
# (the "asyncio" variant: what refold[server] alone gives, without uvloop)
ASYNCIO_LAUNCHER = ("import sys, refold.server.runner as r; made = r.uvicorn_config; "
                    "r.uvicorn_config = lambda *a, **k: (lambda c: (setattr(c, 'loop', "
                    "'asyncio'), c)[1])(made(*a, **k)); import refold.cli.serve; "
                    "from refold.cli.main import main; sys.argv[0] = 'refold'; main()")
# runs refold's CLI with the httpx transport preferred (the "httpx" variant)
HTTPX_LAUNCHER = ("import sys, refold.server.transport as t; t.DEFAULT_TRANSPORT = 'httpx'; "
                  "from refold.cli.main import main; sys.argv[0] = 'refold'; main()")


def start_proxy(home: Path, upstream: str, cpus: set[int] | None = None,
                variant: str = "new", old_src: str = "") -> tuple[subprocess.Popen[bytes], str]:
    home.mkdir(parents=True, exist_ok=True)
    log = home / "serve.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFOLD_")}
    if variant == "old":
        env["PYTHONPATH"] = old_src
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    launch = (["-c", HTTPX_LAUNCHER] if variant == "httpx"
              else ["-c", ASYNCIO_LAUNCHER] if variant == "asyncio" else ["-m", "refold.cli.main"])
    command = [sys.executable, *launch, "-v", "--home", str(home), "serve",
               "--upstream", upstream, "--port", "0", "--context-length", "128000"]
    if variant == "floor":  # the same server stack forwarding bytes unread (proxy_floor.py)
        command = [sys.executable, str(Path(__file__).with_name("proxy_floor.py")), upstream]
    if variant == "ledger-floor":  # plus the least a recording proxy does (its module doc)
        command = [sys.executable, str(Path(__file__).with_name("proxy_ledger_floor.py")),
                   upstream, str(home / "ledger-floor.db")]
    proc = subprocess.Popen(command, stdout=log.open("ab"), stderr=log.open("ab"), env=env,
                            preexec_fn=pin)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        match = BANNER.search(log.read_text(errors="replace"))
        if match:
            url = f"http://127.0.0.1:{match.group(1)}/v1"
            try:
                httpx.get(url + "/models", timeout=2).raise_for_status()
                return proc, url
            except httpx.HTTPError:
                pass
        time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"refold serve did not start:\n{log.read_text(errors='replace')}")


STREAM = True  # --json: non-streaming turns instead


async def one_turn(client: httpx.AsyncClient, url: str,
                   history: list[dict[str, Any]]) -> tuple[float, float]:
    start = time.perf_counter()
    first = done = 0.0
    if not STREAM:  # a JSON reply: its first byte is its whole body
        response = await client.post(url + "/chat/completions", json={
            "model": "scripted-model", "messages": history})
        response.raise_for_status()
        done = time.perf_counter() - start
        return done, done
    async with client.stream("POST", url + "/chat/completions", json={
            "model": "scripted-model", "messages": history, "stream": True}) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not first and '"content": "' in line and '"content": ""' not in line:
                first = time.perf_counter() - start
            if line == "data: [DONE]":
                done = time.perf_counter() - start  # then read to the end: keep-alive
    return first, done


async def conversation(client: httpx.AsyncClient, url: str, worker: int, turns: int,
                       tag: str, out: list[tuple[float, float]]) -> None:
    """``turns`` turns, in conversations of at most ``MAX_TURNS`` (histories stay agent-sized)."""
    done = 0
    while done < turns:
        history: list[dict[str, Any]] = [
            {"role": "system", "content": "You are a benchmark assistant."},
            {"role": "user", "content": f"[{tag}] worker {worker} conversation {done}: hello"}]
        for turn in range(min(MAX_TURNS, turns - done)):
            out.append(await one_turn(client, url, window_of(history)))
            history += [{"role": "assistant", "content": REPLY},
                        {"role": "user", "content": f"follow-up {turn} from worker {worker}"}]
            done += 1


WINDOW = 0  # --window N: the system message and the last N messages are sent


def window_of(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What a client sends: the whole history, or with ``--window`` its system message and
    its last ``WINDOW`` messages starting on a user turn (LangChain's ``trim_messages(...,
    include_system=True, start_on="human")``)."""
    if not WINDOW or len(history) <= WINDOW + 1:
        return history
    rest = history[-WINDOW:]
    while rest and rest[0]["role"] != "user":
        rest = rest[1:]
    return history[:1] + rest


async def level(url: str, concurrency: int, turns: int, tag: str, pid: int | None = None
                ) -> tuple[list[tuple[float, float]], float, float]:
    """The (TTFB, total) of every request, process ``pid``'s CPU seconds meanwhile, and the
    wall seconds the requests took."""
    out: list[tuple[float, float]] = []
    limits = httpx.Limits(max_connections=concurrency + 10,
                          max_keepalive_connections=concurrency + 10)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        await conversation(client, url, -1, 1, tag + "-warm", [])  # connections, imports
        cpu = cpu_seconds(pid) if pid else 0.0
        wall = time.perf_counter()
        await asyncio.gather(*(conversation(client, url, w, turns, tag, out)
                               for w in range(concurrency)))
        wall = time.perf_counter() - wall
        cpu = cpu_seconds(pid) - cpu if pid else 0.0
    return out, cpu, wall


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (Linux /proc; NaN elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def report(concurrency: int, direct: list[tuple[float, float]],
           proxied: list[tuple[float, float]]) -> str:
    cells = [f"{concurrency:>4}", f"{len(proxied):>5}"]
    for index in (1, 0):  # total, then TTFB
        d = [x[index] * 1000 for x in direct]
        p = [x[index] * 1000 for x in proxied]
        for q in (0.5, 0.99):
            cells.append(f"{pct(d, q):8.2f} {pct(p, q):8.2f} {pct(p, q) - pct(d, q):+8.2f}")
    return " | ".join(cells)


def ledger_costs(home: Path, requests: int, synchronous: str) -> str:
    """p50/p99 of the runtime calls on the proxy's critical path, in process, same shapes.

    ``prepare_history`` (sync the re-sent history, build the projection) runs before the first
    byte; ``record`` (store the reply, usage) before the final ``[DONE]``.
    """
    from refold.runtime.engine import Engine
    from refold.store import open_store

    store = open_store(str(home / f"ledger-costs-{synchronous}.db"),
                       sqlite_synchronous=synchronous)
    engine = Engine(store, model="scripted-model", context_length=128_000,
                    memory_dir=home / "ledger-memories")
    prepare: list[float] = []
    record: list[float] = []
    long_turns: list[float] = []
    try:
        for conv in range(max(1, requests // MAX_TURNS)):
            conversation_turns(engine, conv, MAX_TURNS, prepare, record)
        # one long agent conversation: the same turn at a 1,000-message history
        conversation_turns(engine, -1, 20, [], [], long_turns, prefix=LONG_HISTORY)
    finally:
        engine.close()
        store.close()
    return (f"runtime on the critical path (in process, SQLite synchronous={synchronous}, "
            f"{len(prepare)} turns): prepare_history p50 {pct(prepare, 0.5):.2f} / p99 "
            f"{pct(prepare, 0.99):.2f} ms, record p50 {pct(record, 0.5):.2f} / p99 "
            f"{pct(record, 0.99):.2f} ms; a turn (prepare_history + record) at a "
            f"{LONG_HISTORY}-message history: p50 {pct(long_turns, 0.5):.2f} ms")


LONG_HISTORY = 1000


def conversation_turns(engine: Any, conv: int, turns: int, prepare: list[float],
                       record: list[float], whole: list[float] | None = None,
                       prefix: int = 0) -> None:
    """``turns`` proxy turns of one conversation (after ``prefix`` re-sent messages, the first
    of them stored untimed), appending each call's milliseconds."""
    rt = engine.open_session(None, new=True, source="bench")
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a benchmark assistant."},
        {"role": "user", "content": f"conversation {conv}: hello"}]
    for index in range(prefix // 2):
        history += [{"role": "assistant", "content": f"{REPLY} ({index})"},
                    {"role": "user", "content": f"earlier question {index}"}]
    if prefix:
        rt.prepare_history(history)
        rt.record({"role": "assistant", "content": REPLY})
        history.append({"role": "assistant", "content": REPLY})
        history.append({"role": "user", "content": "and now?"})
    for turn in range(turns):
        start = time.perf_counter()
        rt.prepare_history(history)
        middle = time.perf_counter()
        rt.record({"role": "assistant", "content": REPLY},
                  usage={"prompt_tokens": 40, "completion_tokens": 15})
        end = time.perf_counter()
        prepare.append((middle - start) * 1000)
        record.append((end - middle) * 1000)
        if whole is not None:
            whole.append((end - start) * 1000)
        history += [{"role": "assistant", "content": REPLY},
                    {"role": "user", "content": f"follow-up {turn}"}]


def main() -> None:
    global STREAM, WINDOW, MAX_TURNS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="1,10")
    parser.add_argument("--requests", type=int, default=400,
                        help="requests per level and path (split over the clients; at least "
                             f"{MAX_TURNS} per client)")
    parser.add_argument("--rounds", type=int, default=4,
                        help="alternating direct/proxy rounds per level")
    parser.add_argument("--variants", default="new",
                        help="proxies to compare in the same run: new, httpx, asyncio, old, floor (the same "
                             "server stack forwarding bytes unread: bench/proxy_floor.py), "
                             "ledger-floor (the floor plus the least a recording proxy does: "
                             "bench/proxy_ledger_floor.py)")
    parser.add_argument("--old-src", default="",
                        help="the src directory of the checkout the 'old' variant runs")
    parser.add_argument("--reply-chars", type=int, default=0,
                        help="a longer reply of this many characters (the scripted upstream "
                             "streams 16 a chunk: 3200 gives 200 chunks); default: a short one")
    parser.add_argument("--json", action="store_true",
                        help="non-streaming turns (a JSON reply) instead of streams")
    parser.add_argument("--window", type=int, default=0,
                        help="clients send their system message and only their last N messages "
                             "(a sliding window), in conversations of 60 turns; default: the "
                             "whole history, conversations of 20 turns")
    parser.add_argument("--proxy-cpus", default="",
                        help="pin the proxy to these CPUs (e.g. 1) and this process (load "
                             "generator and scripted upstream) to the others: the proxy's own "
                             "added latency, without competing with the load for cores")
    args = parser.parse_args()
    STREAM = not args.json
    if args.window:  # long conversations: most turns slide the window
        WINDOW, MAX_TURNS = args.window, 60
    levels = [int(x) for x in args.levels.split(",")]
    variants = [v for v in args.variants.split(",") if v]
    if "old" in variants and not Path(args.old_src, "refold").is_dir():
        raise SystemExit("error: --variants old needs --old-src pointing at a checkout's src "
                         "(e.g. git archive 0d24073 src | tar -x -C /tmp/old)")
    proxy_cpus = {int(x) for x in args.proxy_cpus.split(",") if x} or None
    if proxy_cpus:
        rest = os.sched_getaffinity(0) - proxy_cpus
        if not rest:
            raise SystemExit("--proxy-cpus leaves no CPU for the load generator")
        os.sched_setaffinity(0, rest)
        print(f"proxy on CPUs {sorted(proxy_cpus)}, load generator and upstream on {sorted(rest)}")
    global REPLY
    if args.reply_chars > 0:  # prose of the length asked for (the clients re-send it too)
        prose = ("The function reads the config file, validates each entry and returns a list "
                 "of parsed settings; errors are collected and reported together at the end. ")
        REPLY = (prose * (args.reply_chars // len(prose) + 1))[:args.reply_chars]
    reply = ScriptedReply(content=REPLY)
    with tempfile.TemporaryDirectory() as tmp, serve(default=lambda body: reply) as upstream:
        procs: dict[str, tuple[subprocess.Popen[bytes], str]] = {}
        try:
            for variant in variants:
                procs[variant] = start_proxy(Path(tmp) / variant, upstream.base_url,
                                             proxy_cpus, variant, args.old_src)
            print(f"upstream {upstream.base_url} (scripted, loopback); proxies "
                  f"{ {v: url for v, (_, url) in procs.items()} } (refold serve, SQLite in a "
                  "temp home); ms; added = proxy - direct")
            print("     variant conc |  reqs | total p50: direct    proxy    added | total p99: "
                  "direct    proxy    added | ttfb p50: direct    proxy    added | ttfb p99: "
                  "direct    proxy    added")
            for concurrency in levels:
                run_level(concurrency, args, upstream.base_url, procs)
        finally:
            for proc, _ in procs.values():
                proc.terminate()
                proc.wait(30)
        for variant in variants:  # the proxy's own count of how its turns ran (at shutdown)
            log = Path(tmp) / variant / "serve.log"
            for line in log.read_text(errors="replace").splitlines():
                if "turns prepared on the event loop" in line:
                    print(f"proxy {variant}:", line.split(": ", 1)[-1], flush=True)
        for synchronous in ("NORMAL", "FULL"):  # serve's default, then the library's
            print(ledger_costs(Path(tmp), args.requests, synchronous), flush=True)


def run_level(concurrency: int, args: argparse.Namespace, direct_url: str,
              procs: dict[str, tuple[subprocess.Popen[bytes], str]]) -> None:
    """Direct and every proxy variant at one concurrency, alternating in rounds so a drift in
    the machine's speed (other tenants, frequency) lands on all sides alike. Every client holds
    at least one whole conversation (MAX_TURNS turns): with fewer, a level would measure mostly
    first turns (a session's creation)."""
    requests = max(args.requests, concurrency * MAX_TURNS)
    rounds = max(1, min(args.rounds, requests // (concurrency * MAX_TURNS)))
    turns = max(1, requests // concurrency // rounds)
    direct: list[tuple[float, float]] = []
    proxied: dict[str, list[tuple[float, float]]] = {v: [] for v in procs}
    cpu = dict.fromkeys(procs, 0.0)
    wall = dict.fromkeys(procs, 0.0)
    for round_ in range(rounds):
        # every conversation opens differently (a conversation that opens like an earlier one
        # is a branch of it: correct, but not the normal turn measured here)
        tag = f"c{concurrency}-r{round_}"
        direct += asyncio.run(level(direct_url, concurrency, turns, "direct-" + tag))[0]
        for variant, (proc, url) in procs.items():
            out, used, took = asyncio.run(level(url, concurrency, turns,
                                                f"{variant}-{tag}", proc.pid))
            proxied[variant] += out
            cpu[variant] += used
            wall[variant] += took
    mean_d = statistics.fmean(x[1] for x in direct) * 1000
    for variant, out in proxied.items():
        print(f"{variant:>12} " + report(concurrency, direct, out), flush=True)
        mean_p = statistics.fmean(x[1] for x in out) * 1000
        print(f"             mean total: direct {mean_d:.2f} ms, proxy {mean_p:.2f} ms, ratio "
              f"{mean_p / mean_d:.2f}x; proxy process CPU {cpu[variant] / len(out) * 1000:.2f} "
              f"ms/request; {len(out) / wall[variant]:.0f} requests/s (one worker)", flush=True)


if __name__ == "__main__":
    main()
