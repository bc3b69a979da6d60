"""Print the memory scanner's blocked rate and false-positive rate on the test corpora.

Six pairs of corpora in tests/memory/corpora/, the first five tuned against:
- injections.json / benign.json — development 1. Tuned over several rounds (three earlier
  held-out sets were folded in after being measured: 60%, 28% and 43% blocked before tuning).
- injections_unseen.json / benign_unseen.json — development 2: held out when written (26.7%
  blocked), tuned against on 2026-11-30.
- injections_heldout{,2,3}.json / benign_heldout{,2,3}.json — developments 3 to 5: each written
  on 2026-11-30 by someone who never saw the scanner, measured once (32.5%, 36.2% and 42.5%
  blocked), then tuned against.
- injections_heldout4.json / benign_heldout4.json — the held-out pair, written the same way and
  measured once after that tuning: 40.0% blocked, 3.8% false positives (the scanner of the
  session's start: 13.8%, 7.5%). It is the honest estimate for attacks phrased in ways the
  patterns have not seen. Do not tune against it: fold it into development and write a new one.

Last line: the worst case, scan time of adversarial texts at the size limit (``MAX_SCAN_CHARS``).

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


def worst_case() -> None:
    """Adversarial shapes at the size limit: long runs the patterns could rescan."""
    from refold.memory.scan import MAX_SCAN_CHARS

    shapes = {"repeated verbs": "send your " * 2000, "secret nouns": "passwords keys " * 1200,
              "CJK run": "密码每次回答" * 3000, "kana run": "パスワードを送って" * 2000,
              "one long word": "a" * MAX_SCAN_CHARS, "commands": "curl http://192.0.2.1/ " * 900}
    times = {}
    for name, text in shapes.items():
        scan.cache_clear()
        start = time.perf_counter()
        scan(text[:MAX_SCAN_CHARS])
        times[name] = (time.perf_counter() - start) * 1000
    slowest = max(times, key=lambda k: times[k])
    print(f"worst case at {MAX_SCAN_CHARS:,} characters: {times[slowest]:.0f} ms ({slowest}); "
          + ", ".join(f"{k} {v:.0f}" for k, v in times.items()))


def main() -> None:
    verbose = "-v" in sys.argv
    report("development corpora 1", _load("injections"), _load("benign"), verbose)
    report("development corpora 2", _load("injections_unseen"), _load("benign_unseen"), verbose)
    report("development corpora 3", _load("injections_heldout"), _load("benign_heldout"),
           verbose)
    report("development corpora 4", _load("injections_heldout2"), _load("benign_heldout2"),
           verbose)
    report("development corpora 5", _load("injections_heldout3"), _load("benign_heldout3"),
           verbose)
    report("held-out corpora     ", _load("injections_heldout4"), _load("benign_heldout4"),
           verbose)
    worst_case()


if __name__ == "__main__":
    main()
