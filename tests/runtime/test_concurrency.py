"""One engine, several sessions driven from several threads: nothing lost, nothing mixed."""

from __future__ import annotations

import threading
from pathlib import Path

from refold.runtime import Engine
from refold.store import Store

from ._helpers import WINDOW, answer, tool_turn

SYSTEM = "You are a test agent."
TURNS = 14


def test_threads_on_separate_sessions(store: Store, tmp_path: Path) -> None:
    engine = Engine(store, model="gpt-4o-mini", context_length=WINDOW,
                    memory_dir=tmp_path / "memories")
    runtimes = [engine.open_session(new=True, title=f"worker {n}") for n in range(3)]
    errors: list[BaseException] = []

    def work(n: int) -> None:
        rt = runtimes[n]
        try:
            for i in range(TURNS):
                rt.prepare(tool_turn(1000 * n + i, size=250), system_prompt=SYSTEM)
                rt.record(answer(1000 * n + i),
                          usage={"prompt_tokens": 100, "completion_tokens": 5})
        except BaseException as exc:  # surfaced below; a thread cannot fail the test itself
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    engine.close()
    assert not errors, errors
    for n, rt in enumerate(runtimes):
        rows = store.get_messages(rt.session_id)
        assert len(rows) == TURNS * 4
        # every row belongs to this worker: its tool-call ids carry the worker's number
        calls = [r.message["tool_calls"][0]["id"] for r in rows if r.message.get("tool_calls")]
        assert [int(c.split("_")[1]) // 1000 for c in calls] == [n] * TURNS
        assert store.list_checkpoints(rt.session_id)  # each compacted on its own
