"""Processes the kill tests SIGKILL: a compactor holding the lease, a runtime mid-turns.

Each opens its own store from a URL or SQLite path, as a separate refold process would.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from refold.store import Store, open_store


def _open(target: str) -> Store:
    return open_store(target)


def hold_lease(target: str, session_id: str, ready: str) -> None:
    """Take the session's compaction lease as a compactor does, then hang until killed."""
    store = _open(target)
    assert store.acquire_lease(f"compact:{session_id}", "killed-compactor", 300.0)
    Path(ready).write_text("held")
    time.sleep(600)


def run_turns(target: str, session_id: str, ready: str, context_length: str) -> None:
    """Turns (with compactions) on a shared session until killed; ``ready`` after the first."""
    from refold.runtime import Engine

    store = _open(target)
    engine = Engine(store, model="gpt-4o-mini", context_length=int(context_length))
    rt = engine.open_session(session_id)
    i = 0
    while True:
        lines = "\n".join(f"k{i} line {k}: test_{k} failed in the build" for k in range(30))
        prepared = rt.prepare([{"role": "user", "content": f"killed turn {i}\n{lines}"}])
        reply: dict[str, Any] = {"role": "assistant", "content": f"killed answer {i}"}
        rt.record(reply, usage={"prompt_tokens": prepared.tokens, "completion_tokens": 3})
        if i == 0:
            Path(ready).write_text("running")
        i += 1


if __name__ == "__main__":
    {"hold_lease": hold_lease, "run_turns": run_turns}[sys.argv[1]](*sys.argv[2:])
