"""One compaction per window: runtimes in one process and across stores (as processes or hosts
would) commit a checkpoint only over the view they planned from, and never move it backwards."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from refold.runtime import Engine
from refold.store import Store

WINDOW = 8_000
SYSTEM = "You are a test agent."
RUNTIMES = 8
TURNS = 5


def ask(worker: int, i: int) -> dict[str, Any]:
    lines = "\n".join(f"w{worker} t{i} line {k}: the build log says test_{k} failed"
                      for k in range(25))
    return {"role": "user", "content": f"worker {worker} turn {i}\n{lines}"}


def tool_turn(i: int, size: int = 500) -> list[dict[str, Any]]:
    """A user ask, a tool call and a large tool result (as tests/runtime/_helpers.py)."""
    log = "\n".join(f"tests/test_mod{i}.py::test_case_{k} FAILED AssertionError: {k} != {k + 1}"
                    for k in range(size // 10))
    return [
        {"role": "user", "content": f"step {i}: please run the tests for module {i}"},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": f"call_{i}", "type": "function",
            "function": {"name": "terminal", "arguments": f'{{"cmd": "pytest -q tests/{i}"}}'}}]},
        {"role": "tool", "tool_call_id": f"call_{i}", "content": log},
    ]


def reply(worker: int, i: int) -> dict[str, Any]:
    return {"role": "assistant", "content": f"worker {worker} answer {i}: fixed module {i}."}


def assert_one_checkpoint_per_window(store: Store, session_id: str) -> None:
    """Each checkpoint moves the kept tail forward: none re-compacts a window another one
    already compacted, none regresses the view."""
    starts = [c.tail_start_seq for c in store.list_checkpoints(session_id)]
    assert starts, "nothing was compacted: the test does not exercise compaction"
    assert starts == sorted(set(starts)), f"windows compacted twice or backwards: {starts}"


@pytest.mark.parametrize(("size", "reading", "background"), [
    (800, 1.5, False),  # compacted window 16 twice before the compare-and-set: [5, 12, 16, 16]
    (500, 1.2, True),   # background plans are started and used
])
def test_background_and_foreground_in_one_process_compact_each_window_once(
        opener: Callable[[], Store], size: int, reading: float, background: bool) -> None:
    store = opener()
    with Engine(store, model="gpt-4o-mini", context_length=WINDOW) as engine:
        rt = engine.open_session(new=True)
        compactions = 0
        for i in range(10):
            prepared = rt.prepare(tool_turn(i, size), system_prompt=SYSTEM)
            compactions += prepared.compaction is not None
            # the provider reads more than estimated: the post-response policy compacts too
            rt.record(reply(0, i), usage={"prompt_tokens": int(prepared.tokens * reading),
                                          "completion_tokens": 5})
        if background:
            assert rt.precompactor.started > 0  # background pre-compaction took part
        assert_one_checkpoint_per_window(store, rt.session_id)


def test_eight_runtimes_on_one_session(opener: Callable[[], Store]) -> None:
    first = opener()
    session = first.create_session(title="shared")
    engines = [Engine(opener(), model="gpt-4o-mini", context_length=WINDOW)
               for _ in range(RUNTIMES)]
    runtimes = [e.open_session(session.id) for e in engines]
    errors: list[BaseException] = []
    start = threading.Barrier(RUNTIMES)

    def work(n: int) -> None:
        try:
            start.wait()
            for i in range(TURNS):
                prepared = runtimes[n].prepare([ask(n, i)], system_prompt=SYSTEM)
                runtimes[n].record(reply(n, i), usage={
                    "prompt_tokens": prepared.tokens, "completion_tokens": 5})
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(RUNTIMES)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for e in engines:
        e.close()
    assert_one_checkpoint_per_window(first, session.id)
    assert not errors, errors[:3]
    contents = [str(r.message.get("content")) for r in first.get_messages(session.id)]
    sent = [str(ask(n, i)["content"]) for n in range(RUNTIMES) for i in range(TURNS)] + [
        str(reply(n, i)["content"]) for n in range(RUNTIMES) for i in range(TURNS)]
    assert sorted(contents) == sorted(sent)  # 0 lost, 0 duplicates
