"""Compaction quality on real public agent trajectories (see bench/trajectories.py for the data).

    python bench/bench_compaction_quality.py [--data /work/data/trajectories] [--json out.json]

Each trajectory is cut after 60%, 80% and 100% of its messages; each cut (of at least
``--min-tokens``) is compacted to 1/2 and 1/4 of its size (``context_length`` = its size).
Reported, against labels made from the environment's own results (bench/trajectories.py):

- validity: the output passes refold's OpenAI, Anthropic and strict provider checks;
- fits-or-warns: the output fits the target, or a warning says "does not fit" and why;
- identifier retention: paths opened/edited, commands run and exception lines printed in the
  replaced span that appear verbatim in the output;
- "modified" precision/recall: files the summary lists as modified vs files truly written;
- last-outcome accuracy: the last check command of the replaced span (a run of a program or a
  test, outcome from its recorded exit code or failure text) is under Blocked when it failed
  and under Done (not Blocked) when it passed;
- task kept: the first real user request's substance (the first line of its task block —
  an issue's title — or of its text) appears verbatim (whitespace aside) in the output;
- anchors' share of the summary's tokens; CPU seconds per million input tokens;
- with ``--replay``: each trajectory fed turn by turn through the library ``Engine`` at a small
  window (``--replay-window``): requests sent over the window, and turns over the threshold
  that neither compacted nor warned (a stalled compaction).

Prints figures; asserts nothing. The targets of issue 13 are printed next to them.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from trajectories import (
    DEFAULT_ROOT,
    Trajectory,
    events,
    identifiers,
    load_all,
    prefixes,
    same_file,
)

from refold.compaction import compact, provider_problems
from refold.compaction.builtin import after_demonstration, is_demonstration, task_text
from refold.messages.model import content_text
from refold.tokens.models import get_counter

_HEADING = re.compile(r"^#{2,3} (.+)$")
_MODIFIED = re.compile(r"^- `([^`]+)` — (.*)$")


def sections(summary: str) -> dict[str, list[str]]:
    """The summary's bullet lines under each heading (a parser of its own, not refold's)."""
    out: dict[str, list[str]] = {}
    current = ""
    for line in summary.splitlines():
        head = _HEADING.match(line)
        if head:
            current = head.group(1).strip().lower()
            out.setdefault(current, [])
        elif line.startswith("- ") and current:
            out[current].append(line)
    return out


@dataclass
class Tally:
    cases: int = 0
    valid: dict[str, int] = field(default_factory=lambda: {"openai": 0, "anthropic": 0,
                                                           "strict": 0})
    fits_or_warns: int = 0
    fits: int = 0
    ids_total: int = 0
    ids_kept: int = 0
    claimed: int = 0
    claimed_true: int = 0
    written: int = 0
    written_claimed: int = 0
    outcomes: int = 0
    outcomes_right: int = 0
    tasks: int = 0
    tasks_kept: int = 0
    anchor_tokens: int = 0
    summary_tokens: int = 0
    cpu: float = 0.0
    tokens_in: int = 0
    misses: list[str] = field(default_factory=list)


def _claimed_modified(summary: str) -> set[str]:
    files = sections(summary).get("relevant files", [])
    return {m.group(1) for line in files if (m := _MODIFIED.match(line))
            and "modified" in m.group(2)}


def _check_state(summary: str, command: str) -> str:
    parts = sections(summary)
    if any(command in line for line in parts.get("blocked", [])):
        return "failing"
    if any(command in line for line in parts.get("done", [])):
        return "passing"
    return "absent"


def task_line(msgs: list[dict[str, Any]]) -> str | None:
    """The first real user request's substance: the first line of its task block (an issue's
    title) or of its text, of at least three words, whitespace collapsed, at most 80 chars."""
    # (SWE-agent's demonstration of another task is no request; what follows it in its
    # message, when anything does, is this run's task)
    first = next((text for m in msgs if m.get("role") == "user" and (text := (
        after_demonstration(content_text(m)) if is_demonstration(m) else content_text(m)))),
        None)
    if first is None:
        return None
    for line in task_text(first).splitlines():
        words = line.split()
        if len(words) >= 3 and not line.lstrip().startswith("<"):
            return " ".join(words)[:80]
    return None


def _flat(text: str) -> str:
    return " ".join(text.split())


def measure(traj: Trajectory, name: str, msgs: list[dict[str, Any]], share: float,
            tally: Tally, counter: Any) -> None:
    size = counter.count_messages(msgs)
    cut = Trajectory(traj.name, traj.source, msgs, traj.patch_files if len(msgs) == len(
        traj.messages) else set())
    start = time.process_time()
    result = compact(msgs, context_length=size, target_tokens=int(size * share),
                     model="gpt-4o")
    tally.cpu += time.process_time() - start
    tally.tokens_in += size
    rep = result.report
    tally.cases += 1
    for provider in tally.valid:
        tally.valid[provider] += not provider_problems(result.messages, provider)
    tally.fits += rep.fits
    warned = any("does not fit" in w for w in rep.warnings)
    tally.fits_or_warns += rep.fits or warned
    if not (rep.fits or warned):
        tally.misses.append(f"{name} 1/{round(1 / share)}: no fit, no warning ({rep.reason})")
    out_text = "\n".join(content_text(m) for m in result.messages)
    task = task_line(msgs)
    if task is not None:
        tally.tasks += 1
        tally.tasks_kept += task in _flat(out_text)
        if task not in _flat(out_text):
            tally.misses.append(f"{name} 1/{round(1 / share)}: task lost: {task[:50]}")
    if rep.summarized == 0 or not rep.summary:
        return
    ids = identifiers(cut, rep.head_end, rep.tail_start)
    kept = {i for i in ids if i in out_text}
    tally.ids_total += len(ids)
    tally.ids_kept += len(kept)
    evs = events(cut)
    written = {e.path for e in evs if e.kind == "write" and e.position < rep.tail_start}
    written |= cut.patch_files
    claims = _claimed_modified(rep.summary)
    tally.claimed += len(claims)
    good = {c for c in claims if any(same_file(c, w) for w in written)}
    tally.claimed_true += len(good)
    tally.misses += [f"{name} 1/{round(1 / share)}: claimed modified, not written: {c}"
                     for c in sorted(claims - good)]
    in_span = {e.path for e in evs if e.kind == "write"
               and rep.head_end <= e.position < rep.tail_start}
    tally.written += len(in_span)
    tally.written_claimed += sum(any(same_file(c, w) for c in claims) for w in in_span)
    checks = [e for e in evs if e.kind == "check" and rep.head_end <= e.position < rep.tail_start]
    if checks:
        last = checks[-1]
        state = _check_state(rep.summary, last.command)
        right = state == ("passing" if last.ok else "failing")
        tally.outcomes += 1
        tally.outcomes_right += right
        if not right:
            tally.misses.append(f"{name} 1/{round(1 / share)}: last check `{last.command[:60]}`"
                                f" {'ok' if last.ok else 'failed'}, summary says {state}")
    anchors = "\n".join(rep.anchors)
    tally.anchor_tokens += counter.count_text(anchors) if anchors else 0
    tally.summary_tokens += counter.count_text(rep.summary)


def _pct(a: int, b: int) -> str:
    return f"{100 * a / b:5.1f}% ({a}/{b})" if b else "  n/a"


def report(label: str, t: Tally) -> dict[str, Any]:
    print(f"\n== {label}: {t.cases} compactions ==")
    for provider, ok in t.valid.items():
        print(f"valid {provider:<10} {_pct(ok, t.cases)}   target 100%")
    print(f"fits              {_pct(t.fits, t.cases)}")
    print(f"fits-or-warns     {_pct(t.fits_or_warns, t.cases)}   target 100%")
    print(f"identifiers kept  {_pct(t.ids_kept, t.ids_total)}")
    print(f"modified precision {_pct(t.claimed_true, t.claimed)}   target >= 98%")
    print(f"modified recall   {_pct(t.written_claimed, t.written)}")
    print(f"last outcome right {_pct(t.outcomes_right, t.outcomes)}   target >= 95%")
    print(f"task kept         {_pct(t.tasks_kept, t.tasks)}")
    print(f"anchors' share    {_pct(t.anchor_tokens, t.summary_tokens)} of summary tokens")
    per_m = t.cpu / max(1, t.tokens_in) * 1e6
    print(f"CPU               {per_m:.2f} s per million input tokens ({t.tokens_in} tokens)")
    return {"cases": t.cases, "valid": t.valid, "fits": t.fits,
            "fits_or_warns": t.fits_or_warns, "ids": [t.ids_kept, t.ids_total],
            "precision": [t.claimed_true, t.claimed], "recall": [t.written_claimed, t.written],
            "outcome": [t.outcomes_right, t.outcomes], "task": [t.tasks_kept, t.tasks],
            "anchor_share": [t.anchor_tokens, t.summary_tokens], "cpu_per_m": per_m}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_ROOT)
    parser.add_argument("--min-tokens", type=int, default=4000)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--misses", action="store_true", help="list every miss")
    parser.add_argument("--replay", action="store_true",
                        help="also feed each trajectory turn by turn through the Engine")
    parser.add_argument("--replay-window", type=int, default=8000)
    args = parser.parse_args()
    trajectories = load_all(args.data)
    counter = get_counter("gpt-4o")
    results: dict[str, Any] = {}
    print(f"{len(trajectories)} trajectories from {args.data}")
    for share in (0.5, 0.25):
        tally = Tally()
        for traj in trajectories:
            for name, msgs in prefixes(traj):
                if counter.count_messages(msgs) >= args.min_tokens:
                    measure(traj, name, msgs, share, tally, counter)
        results[f"1/{round(1 / share)}"] = report(f"window 1/{round(1 / share)}", tally)
        for miss in tally.misses if args.misses else tally.misses[:8]:
            print("  miss:", miss)
    if args.replay:
        results["replay"] = replay_all(trajectories, args.replay_window)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


def replay(traj: Trajectory, window: int, home: Path) -> tuple[int, int, int, int]:
    """(turns, requests over the window, turns over the threshold that neither compacted nor
    warned, compactions) for ``traj`` fed turn by turn through the library ``Engine``."""
    import refold
    from refold.runtime import Engine

    store = refold.open(str(home / f"{abs(hash(traj.name))}.db"))
    engine = Engine(store, model="gpt-4o", context_length=window, background_precompact=False)
    turns = over = stalled = compactions = 0
    try:
        rt = engine.open_session(new=True, title=traj.name[:90])
        msgs = traj.messages
        system = next((content_text(m) for m in msgs if m.get("role") == "system"), None)
        pending: list[dict[str, Any]] = []
        for msg in (m for m in msgs if m.get("role") != "system"):
            if msg.get("role") != "assistant":
                pending.append(msg)
                continue
            if pending:
                prepared = rt.prepare(pending, system_prompt=system)
                pending, system, turns = [], None, turns + 1
                over += prepared.tokens > window
                compactions += prepared.compaction is not None
                stalled += (prepared.tokens >= prepared.threshold
                            and prepared.compaction is None and not prepared.warnings)
            rt.record(msg)
    finally:
        engine.close()
        store.close()
    return turns, over, stalled, compactions


def replay_all(trajectories: list[Trajectory], window: int) -> dict[str, int]:
    import tempfile

    totals = {"turns": 0, "over_window": 0, "stalled": 0, "compactions": 0}
    with tempfile.TemporaryDirectory() as home:
        for traj in trajectories:
            for key, value in zip(totals, replay(traj, window, Path(home)), strict=True):
                totals[key] += value
    print(f"\n== replay at a {window}-token window: {len(trajectories)} trajectories ==")
    print(f"turns {totals['turns']}, compactions {totals['compactions']}, requests over the "
          f"window {totals['over_window']}, turns over the threshold that neither compacted "
          f"nor warned {totals['stalled']}")
    return totals


if __name__ == "__main__":
    main()
