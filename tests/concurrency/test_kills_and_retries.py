"""Leases die with their holder, retries store nothing twice, contention never fails a turn."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from refold.compaction.structure import provider_problems
from refold.errors import RefoldError
from refold.runtime import Engine
from refold.store import Store

WINDOW = 8_000
WORKERS = str(Path(__file__).with_name("workers.py"))


def _long_session(store: Store) -> str:
    session = store.create_session(title="long")
    for i in range(12):
        store.append_messages(session.id, [
            {"role": "user", "content": f"ask {i}\n" + "\n".join(
                f"line {k}: test_{k} failed in module {i}" for k in range(30))},
            {"role": "assistant", "content": f"answer {i}"}])
    return session.id


def _spawn(tmp_path: Path, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
    ready = tmp_path / f"ready-{time.monotonic_ns()}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, WORKERS, args[0], args[1], args[2], str(ready),
                             *args[3:]], env=env)
    deadline = time.monotonic() + 30
    while not ready.exists():
        assert proc.poll() is None, "the worker died before it was ready"
        assert time.monotonic() < deadline, "the worker never got ready"
        time.sleep(0.02)
    return proc, ready


def _kill(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)


def test_a_killed_compactors_lease_blocks_nothing(opener: Callable[[], Store],
                                                  tmp_path: Path) -> None:
    store = opener()
    sid = _long_session(store)
    proc, _ = _spawn(tmp_path, "hold_lease", store.url, sid)
    _kill(proc)
    with Engine(store, model="gpt-4o-mini", context_length=WINDOW) as engine:
        rt = engine.open_session(sid)
        started = time.monotonic()
        prepared = rt.prepare([{"role": "user", "content": "and now?"}])
        elapsed = time.monotonic() - started
    assert prepared.compaction is not None and store.list_checkpoints(sid)
    assert elapsed < 5.0  # not the 300 s lease, nor the bounded wait for another compactor


@pytest.mark.parametrize("delay", [0.0, 0.4])
def test_killed_mid_turns_then_the_next_request_is_valid(opener: Callable[[], Store],
                                                         tmp_path: Path, delay: float) -> None:
    store = opener()
    sid = store.create_session(title="killed").id
    proc, _ = _spawn(tmp_path, "run_turns", store.url, sid, str(WINDOW))
    time.sleep(delay)  # 0: during the first record; later: during turns that compact
    _kill(proc)
    with Engine(store, model="gpt-4o-mini", context_length=WINDOW) as engine:
        rt = engine.open_session(sid)
        started = time.monotonic()
        prepared = rt.prepare([{"role": "user", "content": "after the crash"}])
        rt.record({"role": "assistant", "content": "fine"})
        assert time.monotonic() - started < 5.0  # nothing left blocked
    assert provider_problems(prepared.messages, "openai") == []
    assert prepared.messages[-1]["content"] == "after the crash"
    contents = Counter(str(r.message.get("content")) for r in store.get_messages(sid))
    assert max(contents.values()) == 1  # nothing stored twice
    starts = [c.tail_start_seq for c in store.list_checkpoints(sid)]
    assert starts == sorted(set(starts))


def test_a_retry_after_a_failed_prepare_stores_once(opener: Callable[[], Store],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    store = opener()
    with Engine(store, model="gpt-4o-mini", context_length=WINDOW) as engine:
        rt = engine.open_session(new=True)
        real = engine.ops.total_from_base
        failures = iter(range(3))

        def flaky(*args: object, **kwargs: object) -> int:
            if next(failures, None) is not None:
                raise RefoldError("the request could not be built")
            return real(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(engine.ops, "total_from_base", flaky)
        message = {"role": "user", "content": "store me once"}
        for _ in range(3):
            with pytest.raises(RefoldError):
                rt.prepare([message])
        prepared = rt.prepare([message])  # the retry that works
        assert prepared.messages[-1]["content"] == "store me once"
        rt.record({"role": "assistant", "content": "done"})
        rt.prepare([message])  # the same text as a new turn is a new message
    contents = [r.message["content"] for r in store.get_messages(rt.session_id)]
    assert contents == ["store me once", "done", "store me once"]


def test_a_held_lease_never_fails_the_turn(opener: Callable[[], Store],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import refold.runtime.context as context

    monkeypatch.setattr(context, "LEASE_WAIT_SECONDS", 0.3)
    store = opener()
    sid = _long_session(store)
    assert store.acquire_lease(f"compact:{sid}", "a-live-compactor", 60)
    with Engine(store, model="gpt-4o-mini", context_length=WINDOW) as engine:
        rt = engine.open_session(sid)
        held = rt.prepare([{"role": "user", "content": "while held"}])
        assert held.compaction is None and held.messages[-1]["content"] == "while held"
        rt.record({"role": "assistant", "content": "ok"})
        store.release_lease(f"compact:{sid}", "a-live-compactor")
        freed = rt.prepare([{"role": "user", "content": "after release"}])
    assert freed.compaction is not None
    contents = Counter(str(r.message.get("content")) for r in store.get_messages(sid))
    assert contents["while held"] == 1 and contents["after release"] == 1


def test_a_compaction_that_fails_fails_prepare_before_anything_is_stored(
        opener: Callable[[], Store], monkeypatch: pytest.MonkeyPatch) -> None:
    """The new message would take the context over the threshold: ``prepare`` compacts first,
    then stores. A compaction that fails (the store refusing the checkpoint) fails the call
    with nothing stored; the retry compacts, stores the message once and sends it."""
    from refold.errors import StorageError

    store = opener()
    sid = _long_session(store)
    rows_before = len(store.get_messages(sid, include_inactive=True))
    real = store.add_checkpoint
    failures = iter(range(1))

    def failing(*args: object, **kwargs: object) -> object:
        if next(failures, None) is not None:
            raise StorageError("disk I/O error (injected)")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "add_checkpoint", failing)
    message = {"role": "user", "content": "one more question"}
    with Engine(store, model="gpt-4o-mini", context_length=WINDOW,
                background_precompact=False) as engine:
        rt = engine.open_session(sid)
        with pytest.raises(StorageError):
            rt.prepare([message])
        assert len(store.get_messages(sid, include_inactive=True)) == rows_before
        prepared = rt.prepare([message])
    assert prepared.compaction is not None and len(store.list_checkpoints(sid)) == 1
    assert prepared.messages[-1]["content"] == "one more question"
    contents = [str(r.message.get("content")) for r in
                store.get_messages(sid, include_inactive=True)]
    assert contents.count("one more question") == 1 and len(contents) == rows_before + 1


def test_a_background_plan_is_not_made_while_another_compactor_holds_the_lease(
        opener: Callable[[], Store]) -> None:
    """Background pre-compaction plans under the session's compaction lease: while another
    compactor (here: another process's holder) has it, no background summary of the window is
    made; once it is free, the next plan is made and used."""
    store = opener()
    sid = store.create_session(title="background").id
    lease = f"compact:{sid}"
    assert store.acquire_lease(lease, "another-process", 60)
    with Engine(store, model="gpt-4o-mini", context_length=WINDOW) as engine:
        rt = engine.open_session(sid)
        i = 0
        while rt.precompactor.started == 0 and i < 200:
            rt.prepare([{"role": "user", "content": f"ask {i}\n" + "\n".join(
                f"line {k}: test_{k} failed in module {i}" for k in range(10))}])
            rt.record({"role": "assistant", "content": f"answer {i}"})
            i += 1
        assert rt.precompactor.started == 1
        assert rt.precompactor.take(wait=True) is None  # gave up: the lease is held
        assert store.list_checkpoints(sid) == []
        store.release_lease(lease, "another-process")
        rt.checkpointer.maybe_precompact(engine.ops.pre_threshold)
        assert rt.precompactor.started == 2
        plan = rt.precompactor.take(wait=True)
        assert plan is not None and plan.base is not None
    # the background holder released the lease after planning
    assert store.acquire_lease(lease, "after", 60)
