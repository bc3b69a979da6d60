"""Read every Claude Code, Codex or Gemini CLI transcript under DIR as ``refold import`` does
and check it.

    python bench/check_agent_logs.py DIR [--format claude-code|codex|gemini]

Prints, per file and in all: messages, tool calls, tool results, and the pairing and role
problems each provider would refuse (``provider_problems``), plus what was left out. Public
data to try: ``marot/spotter``'s ``test/fixtures/transcripts`` (real Claude Code sessions, MIT;
fetch the repository, keep the files out of this one).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from refold.compaction.structure import provider_problems
from refold.errors import RefoldError
from refold.messages.agent_logs import AGENT_FORMATS
from refold.messages.load import load_agent_log, sniff_agent_log


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dir", type=Path)
    parser.add_argument("--format", choices=list(AGENT_FORMATS), default=None)
    args = parser.parse_args()
    totals: Counter[str] = Counter()
    left_out: Counter[str] = Counter()
    for path in sorted(args.dir.rglob("*.json*")):
        if path.suffix not in (".json", ".jsonl") or not path.stat().st_size:
            continue
        fmt = args.format or sniff_agent_log(path)
        if fmt is None:
            print(f"{path}: not an agent's transcript, skipped")
            continue
        try:
            log = load_agent_log(path, fmt)
        except RefoldError as exc:
            print(f"{path}: error: {exc}")
            totals["errors"] += 1
            continue
        calls = sum(len(m.get("tool_calls") or []) for m in log.messages)
        results = sum(m["role"] == "tool" for m in log.messages)
        problems = {p: len(provider_problems(log.messages, p)) for p in ("openai", "anthropic")}
        print(f"{path.relative_to(args.dir)}: {len(log.messages)} messages, {calls} calls, "
              f"{results} results, problems {problems}")
        totals.update(files=1, messages=len(log.messages), calls=calls, results=results,
                      **{f"problems_{p}": n for p, n in problems.items()})
        left_out.update(log.skipped)
    print(f"all: {dict(totals)}; left out {dict(left_out)}")
    sys.exit(1 if totals["errors"] else 0)


if __name__ == "__main__":
    main()
