"""Print the memory scanner's blocked rate and false-positive rate on the two test corpora.

Run: python bench/bench_memory_scan.py [-v]   (-v lists the misses and the false positives)
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from refold.memory.scan import scan

CORPORA = Path(__file__).resolve().parent.parent / "tests" / "memory" / "corpora"


def main() -> None:
    verbose = "-v" in sys.argv
    attacks = json.loads((CORPORA / "injections.json").read_text(encoding="utf-8"))
    benign = json.loads((CORPORA / "benign.json").read_text(encoding="utf-8"))
    start = time.perf_counter()
    missed = [text for text in attacks if scan(text) is None]
    flagged = [(text, scan(text)) for text in benign if scan(text) is not None]
    elapsed = time.perf_counter() - start
    print(f"blocked: {len(attacks) - len(missed)}/{len(attacks)} "
          f"= {(len(attacks) - len(missed)) / len(attacks):.1%}")
    print(f"false positives: {len(flagged)}/{len(benign)} = {len(flagged) / len(benign):.1%}")
    print(f"scan time: {elapsed * 1000 / (len(attacks) + 2 * len(benign)):.3f} ms per text")
    if verbose:
        for text in missed:
            print("MISSED:", repr(text))
        for text, reason in flagged:
            print("FALSE POSITIVE:", repr(text), "->", reason)


if __name__ == "__main__":
    main()
