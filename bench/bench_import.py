"""Print how fast transcripts load, validate and import (no assertions; figures only).

Run: python bench/bench_import.py [N]   (default N = 100000 messages)

Baselines are measured in the same run: plain ``json.loads`` per line for loading, and the
first import for the re-import (which must append nothing and only compare identities).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

from refold.messages import chain_identities, load_messages_file
from refold.store.sqlite import SQLiteStore


def write_transcript(path: Path, n: int) -> None:
    with path.open("w", encoding="utf-8") as fh:
        for i in range(n):
            role = "user" if i % 2 == 0 else "assistant"
            text = f"message {i}: deploy step {i % 97} 部署第 {i % 13} 步"
            fh.write(json.dumps({"role": role, "content": text}, ensure_ascii=False) + "\n")


def timed(label: str, fn):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    value = fn()
    elapsed = time.perf_counter() - start
    print(f"{label:<44} {elapsed:8.3f} s")
    return value, elapsed


def main(n: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "transcript.jsonl"
        write_transcript(path, n)
        print(f"{n} messages, {path.stat().st_size / 1e6:.1f} MB JSONL")
        _, raw = timed("baseline: json.loads per line", lambda: [
            json.loads(line) for line in path.open(encoding="utf-8")])
        messages, loaded = timed("load_messages_file (parse + validate)",
                                 lambda: load_messages_file(path))
        print(f"{'  ratio to baseline':<44} {loaded / raw:8.2f} x")
        timed("chain_identities", lambda: chain_identities(messages))
        store = SQLiteStore(str(Path(tmp) / "refold.db"))
        session = store.create_session(title="bench")
        _, first = timed("sync_messages, first import",
                         lambda: store.sync_messages(session.id, messages))
        result, again = timed("sync_messages, same history again",
                              lambda: store.sync_messages(session.id, messages))
        assert not result.appended
        print(f"{'  re-import / first import':<44} {again / first:8.2f} x")
        store.close()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)
