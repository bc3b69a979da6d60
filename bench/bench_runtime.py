"""Runtime latency: the turn that crosses the compaction threshold, with and without background
pre-compaction, plus the per-turn overhead of ``prepare`` + ``record``.

Same run, same conversation, same summarizer, two engines: one computes the next checkpoint on a
worker thread from 85% of the trigger on, the other compacts when the crossing turn arrives. The
summarizer is the real LLM summarizer (``refold.compaction.llm_summarizer``) against the scripted
OpenAI-compatible server on a local socket, answering after ``--summary-delay`` seconds like a
small hosted model; ``--builtin`` uses the builtin summarizer wrapped with the same delay.
Between turns the agent "waits for its model" (``--model-delay``), which is when background work
runs in a real agent too.

A turn's latency is refold's share of it: ``prepare`` + ``record`` (the model wait excluded); a
crossing turn is one during which a checkpoint was added. Per-turn overhead: a turn that does
not compact, against the baseline of only appending the same messages to a store
(``Store.append_messages``), measured in the same run.

    python bench/bench_runtime.py            # ~25 s
    python bench/bench_runtime.py --turns 60 --summary-delay 0.8
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from refold.compaction.summarizer import SummaryDraft, SummaryRequest
from refold.runtime import Engine
from refold.store import open_store

SYSTEM = "You are a coding agent. Keep diffs minimal."


class SlowSummarizer:
    """The builtin summarizer plus a fixed delay: stands in for a hosted model's latency."""

    def __init__(self, delay: float) -> None:
        from refold.compaction.builtin import BuiltinSummarizer

        self.inner = BuiltinSummarizer()
        self.delay = delay
        self.name = "builtin+delay"

    def summarize(self, request: SummaryRequest) -> SummaryDraft:
        time.sleep(self.delay)
        return self.inner.summarize(request)


def turn(i: int, lines: int) -> list[dict[str, Any]]:
    log = "\n".join(f"tests/test_mod{i}.py::test_case_{k} FAILED "
                    f"AssertionError: expected {k} got {k + 1}" for k in range(lines))
    return [
        {"role": "user", "content": f"step {i}: run the tests of module {i} and fix them"},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": f"c{i}", "type": "function",
            "function": {"name": "terminal", "arguments": f'{{"cmd": "pytest -q tests/m{i}"}}'}}]},
        {"role": "tool", "tool_call_id": f"c{i}", "content": log},
    ]


def answer(i: int) -> dict[str, Any]:
    return {"role": "assistant", "content": f"Fixed module {i}: off-by-one in src/mod{i}.py."}


def run(background: bool, args: argparse.Namespace, summarizer: Any) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(str(Path(tmp) / "bench.db"))
        engine = Engine(store, model="gpt-4o-mini", context_length=args.window,
                        summarizer=summarizer, background_precompact=background)
        rt = engine.open_session(new=True)
        crossing: list[float] = []
        normal: list[float] = []
        for i in range(args.turns):
            checkpoints = len(store.list_checkpoints(rt.session_id))
            started = time.perf_counter()
            prepared = rt.prepare(turn(i, args.lines), system_prompt=SYSTEM)
            elapsed = time.perf_counter() - started
            time.sleep(args.model_delay)  # the agent waits for its model here
            started = time.perf_counter()
            rt.record(answer(i), usage={"prompt_tokens": prepared.tokens,
                                        "completion_tokens": 20})
            elapsed += time.perf_counter() - started  # refold's share of the turn
            compacted = len(store.list_checkpoints(rt.session_id)) > checkpoints
            (crossing if compacted else normal).append(elapsed)
        used = rt.precompactor.used
        engine.close()
        store.close()
    return {"crossing": crossing, "normal": normal, "used": used}


def append_baseline(args: argparse.Namespace) -> list[float]:
    """Only appending the same messages to a fresh store: the floor ``prepare`` sits on."""
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(str(Path(tmp) / "base.db"))
        session = store.create_session()
        times = []
        for i in range(args.turns):
            started = time.perf_counter()
            store.append_messages(session.id, turn(i, args.lines))
            store.append_messages(session.id, [answer(i)])
            times.append(time.perf_counter() - started)
        store.close()
    return times


def _ms(values: list[float]) -> str:
    if not values:
        return "n/a"
    return f"p50 {statistics.median(values) * 1e3:8.1f} ms  max {max(values) * 1e3:8.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=60)
    parser.add_argument("--lines", type=int, default=25, help="tool-output lines per turn")
    parser.add_argument("--window", type=int, default=16_000)
    parser.add_argument("--summary-delay", type=float, default=0.3)
    parser.add_argument("--model-delay", type=float, default=0.2)
    parser.add_argument("--builtin", action="store_true",
                        help="builtin summarizer + the same delay instead of the LLM summarizer")
    args = parser.parse_args()

    if not args.builtin:
        from refold.compaction.llm_summarizer import LLMSummarizer
        from refold.llm import HttpChatClient
        from refold.testing import ScriptedReply, serve

        body = "## Goal\nFix the failing modules.\n## Progress\n### Done\n- fixed modules"
        server = serve(default=lambda _b: ScriptedReply(content=body, delay=args.summary_delay))
        summarizer: Any = LLMSummarizer(HttpChatClient(server.base_url), model="scripted")
    else:
        server = None
        summarizer = SlowSummarizer(args.summary_delay)
    try:
        sync = run(False, args, summarizer)
        background = run(True, args, summarizer)
    finally:
        if server is not None:
            server.close()
    base = append_baseline(args)

    print(f"runtime bench: {args.turns} turns, window {args.window}, summarizer "
          f"{'builtin' if args.builtin else 'llm (scripted server)'} + {args.summary_delay}s, "
          f"model wait {args.model_delay}s")
    print(f"  crossing turn, synchronous compaction : {_ms(sync['crossing'])}"
          f"  ({len(sync['crossing'])} compactions)")
    print(f"  crossing turn, background pre-compact.: {_ms(background['crossing'])}"
          f"  ({len(background['crossing'])} compactions, {background['used']} pre-computed)")
    if sync["crossing"] and background["crossing"]:
        ratio = statistics.median(sync["crossing"]) / statistics.median(background["crossing"])
        print(f"  ratio sync / background (p50)        : {ratio:6.1f}x faster with background")
    print(f"  prepare+record, non-compacting turn   : {_ms(sync['normal'])}")
    print(f"  baseline: append the same messages    : {_ms(base)}")
    if sync["normal"] and base:
        overhead = statistics.median(sync["normal"]) - statistics.median(base)
        print(f"  refold overhead per turn (p50)        : {overhead * 1e3:8.2f} ms "
              f"({statistics.median(sync['normal']) / statistics.median(base):.1f}x)")


if __name__ == "__main__":
    main()
