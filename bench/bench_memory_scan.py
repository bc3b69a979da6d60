"""Print the memory scanner's blocked rate and false-positive rate on the test corpora.

Two pairs of corpora in tests/memory/corpora/:
- injections.json / benign.json — the development corpora. The scanner was tuned against them
  (three earlier held-out sets were folded in after being measured: 60%, 28% and 43% blocked
  before tuning), so their rates are optimistic.
- injections_unseen.json / benign_unseen.json — written after the scanner was frozen and never
  tuned against: the honest estimate for attacks phrased in ways the patterns have not seen.

Run: python bench/bench_memory_scan.py [-v]   (-v lists misses and false positives)
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from refold.memory.scan import scan

CORPORA = Path(__file__).resolve().parent.parent / "tests" / "memory" / "corpora"


def _load(name: str) -> list[str]:
    return list(json.loads((CORPORA / f"{name}.json").read_text(encoding="utf-8")))


def report(label: str, attacks: list[str], benign: list[str], verbose: bool) -> None:
    scan.cache_clear()
    start = time.perf_counter()
    verdicts = {text: scan(text) for text in [*attacks, *benign]}
    per_text = (time.perf_counter() - start) * 1000 / len(verdicts)
    missed = [text for text in attacks if verdicts[text] is None]
    flagged = [(text, verdicts[text]) for text in benign if verdicts[text] is not None]
    caught = len(attacks) - len(missed)
    print(f"{label}: blocked {caught}/{len(attacks)} = {caught / len(attacks):.1%}; "
          f"false positives {len(flagged)}/{len(benign)} = {len(flagged) / len(benign):.1%}; "
          f"{per_text:.3f} ms per scan")
    if verbose:
        for text in missed:
            print("  MISSED:", repr(text))
        for text, reason in flagged:
            print("  FALSE POSITIVE:", repr(text), "->", reason)


def main() -> None:
    verbose = "-v" in sys.argv
    report("development corpora", _load("injections"), _load("benign"), verbose)
    report("unseen corpora     ", _load("injections_unseen"), _load("benign_unseen"), verbose)


if __name__ == "__main__":
    main()
