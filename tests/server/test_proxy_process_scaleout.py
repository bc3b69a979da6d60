"""Scale-out with real processes: two ``refold serve`` processes on one database serving one
conversation in turn (SQLite WAL and PostgreSQL), and ``refold serve --workers 2`` under its
supervisor (a killed worker is replaced, SIGTERM drains and exits 0, no worker outlives the
parent — not even a SIGKILLed one).

The client is the real ``openai`` SDK over sockets, the upstream the scripted server; the
context window is small so compaction runs (foreground and post-response) while the turns
alternate between processes. What must hold: the upstream saw each request as the client sent
it (a compacted stretch replaced by its summary, nothing else changed or added), every message
is stored exactly once, and the checkpoints follow one another (none planned from a view that
another had already replaced).
"""

from __future__ import annotations

import itertools
import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from serve_process import CLIENT_TIMEOUT, Served, alive, start_serve, stop, wait_for

from refold.compaction.summary import PREFIX
from refold.store import Store
from refold.store.base import Checkpoint
from refold.testing import RunningLLM, ScriptedReply, serve

Msg = dict[str, Any]
TURNS = 14
FILLER = "and the details of that step are worth keeping in mind later on " * 5
SMALL_WINDOW = ("--context-length", "2500")


def answer(body: dict[str, Any]) -> ScriptedReply:
    last = [m for m in body["messages"] if m["role"] == "user"][-1]
    return ScriptedReply(content=f"Answer to ({str(last['content'])[:12]}) {FILLER}")


def client(base_url: str) -> openai.OpenAI:
    # a new connection per turn, as a load balancer would spread them
    return openai.OpenAI(base_url=base_url, api_key="none", max_retries=0,
                         timeout=CLIENT_TIMEOUT, default_headers={"Connection": "close"})


def turn(base_url: str, history: list[Msg], stream: bool) -> str:
    sdk = client(base_url)
    try:
        raw = sdk.chat.completions.with_raw_response.create(
            model="scripted-model", messages=history, stream=stream,  # type: ignore[arg-type]
            extra_headers={"X-Refold-Session": "shared"})
        parsed: Any = raw.parse()
        if stream:
            return "".join(c.choices[0].delta.content or "" for c in parsed if c.choices)
        return str(parsed.choices[0].message.content)
    finally:
        sdk.close()


def converse(urls: list[str], turns: int) -> tuple[list[Msg], list[list[Msg]]]:
    """Alternate the turns over ``urls``; (the final history, what the client sent each turn)."""
    history: list[Msg] = [{"role": "system", "content": "You are terse."}]
    sent: list[list[Msg]] = []
    for i in range(turns):
        history.append({"role": "user", "content": f"step {i:02d}: {FILLER}"})
        sent.append([dict(m) for m in history])
        reply = turn(urls[i % len(urls)], history, stream=i % 3 == 1)
        history.append({"role": "assistant", "content": reply})
    return history, sent


def pairs(messages: list[Msg]) -> list[tuple[str, str]]:
    return [(m["role"], str(m.get("content"))) for m in messages if m["role"] != "system"]


def check_faithful(upstream: list[tuple[str, str]], client_sent: list[tuple[str, str]]) -> bool:
    """``upstream`` is ``client_sent`` with at most one stretch replaced by a summary block;
    True when it was (a compacted request)."""
    if upstream == client_sent:
        return False
    head = 0
    while head < min(len(upstream), len(client_sent)) and upstream[head] == client_sent[head]:
        head += 1
    tail = 0
    while tail < min(len(upstream), len(client_sent)) - head \
            and upstream[-1 - tail] == client_sent[-1 - tail]:
        tail += 1
    middle = upstream[head:len(upstream) - tail]
    assert tail >= 1, "the client's last message was not sent as it was"
    assert middle and any(PREFIX[:20] in text for _, text in middle), middle
    assert not set(middle) & set(client_sent), "a client message moved or was duplicated"
    return True


def check_checkpoints(checkpoints: list[Checkpoint]) -> None:
    """Each checkpoint summarizes rows its predecessor still kept: none was planned from a
    view another checkpoint had already replaced (that would be a second compaction of one
    window), and the view only moves forward."""
    for before, after in itertools.pairwise(checkpoints):
        assert after.tail_start_seq > before.tail_start_seq
        assert after.last_seq >= before.tail_start_seq, (before, after)


def check_run(store: Store, up: RunningLLM, history: list[Msg], sent: list[list[Msg]]) -> None:
    assert len(up.llm.requests) == len(sent)  # one upstream call per turn (no retries)
    compacted = sum(check_faithful(pairs(request["messages"]), pairs(client_sent))
                    for request, client_sent in zip(up.llm.requests, sent, strict=True))
    (session,) = store.list_sessions()
    rows = store.get_messages(session.id, include_inactive=True)
    assert [(r.role, str(r.message.get("content"))) for r in rows] == pairs(history)
    assert all(r.active for r in rows)  # stored once, nothing rewound
    checkpoints = store.list_checkpoints(session.id)
    assert checkpoints, "the small window never compacted: the test would prove nothing"
    assert compacted >= 1
    check_checkpoints(checkpoints)


@pytest.fixture
def pg_db(postgres_url: str) -> Iterator[str]:
    from refold.store.postgres import PostgresStore

    schema = f"t_{uuid.uuid4().hex[:12]}"
    sep = "&" if "?" in postgres_url else "?"
    yield f"{postgres_url}{sep}schema={schema}"
    store = PostgresStore(postgres_url, schema=schema)
    store.drop_schema()
    store.close()


def _two_processes(home: Path, up: RunningLLM, env: dict[str, str]) -> list[Served]:
    first = start_serve(home, up.base_url, *SMALL_WINDOW, env_extra=env)
    try:
        second = start_serve(home, up.base_url, *SMALL_WINDOW, env_extra=env)
    except BaseException:
        stop(first)
        raise
    return [first, second]


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_two_serve_processes_alternating_on_one_conversation(
        tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> None:
    home = tmp_path / "home"
    env = {"REFOLD_DB": request.getfixturevalue("pg_db")} if backend == "postgres" else {}
    with serve(default=answer) as up:
        served = _two_processes(home, up, env)
        try:
            history, sent = converse([s.url for s in served], TURNS)
        finally:
            codes = [stop(s) for s in served]
        # uvicorn re-raises the signal after its graceful shutdown
        assert set(codes) <= {0, -signal.SIGTERM}, [s.text() for s in served]
    from refold.store import open_store

    store = open_store(env.get("REFOLD_DB") or str(home / "refold.db"))
    try:
        check_run(store, up, history, sent)
    finally:
        store.close()


@pytest.mark.slow
def test_workers_share_one_port_are_supervised_and_leave_no_orphans(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with serve(default=answer) as up:
        served = start_serve(home, up.base_url, "--workers", "2", *SMALL_WINDOW)
        try:
            wait_for(lambda: len(served.workers()) == 2, "two workers announced")
            first = served.workers()
            assert all(alive(pid) for pid in first)
            history, sent = converse([served.url], TURNS // 2)
            # a crashed worker is replaced, and the conversation goes on
            os.kill(first[0], signal.SIGKILL)
            wait_for(lambda: len(served.workers()) == 3, "the killed worker replaced")
            assert "exited (killed by SIGKILL); restarting" in served.text()
            replacement = served.workers()[2]
            assert alive(replacement) and alive(first[1])
            for i in range(TURNS // 2, TURNS):
                history.append({"role": "user", "content": f"step {i:02d}: {FILLER}"})
                sent.append([dict(m) for m in history])
                history.append({"role": "assistant",
                                "content": turn(served.url, history, stream=i % 2 == 0)})
        finally:
            code = stop(served)
        assert code == 0, served.text()
        assert not any(alive(pid) for pid in served.workers())
    from refold.store.sqlite import SQLiteStore

    store = SQLiteStore(str(home / "refold.db"))
    try:
        check_run(store, up, history, sent)
    finally:
        store.close()

    # the parent SIGKILLed: its workers stop too (the kernel's parent-death signal)
    with serve(default=answer) as up:
        served = start_serve(home, up.base_url, "--workers", "2")
        try:
            wait_for(lambda: len(served.workers()) == 2, "two workers announced")
            served.proc.kill()
            served.proc.wait(10)
            wait_for(lambda: not any(alive(pid) for pid in served.workers()),
                     "the workers of a killed parent exited")
        finally:
            for pid in served.workers():
                if alive(pid):
                    os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.postgres
def test_workers_on_postgresql_serve_one_conversation_faithfully(
        tmp_path: Path, pg_db: str) -> None:
    home = tmp_path / "home"
    with serve(default=answer) as up:
        served = start_serve(home, up.base_url, "--workers", "2", *SMALL_WINDOW,
                             env_extra={"REFOLD_DB": pg_db})
        try:
            wait_for(lambda: len(served.workers()) == 2, "two workers announced")
            history, sent = converse([served.url], TURNS)  # a new connection per turn
        finally:
            code = stop(served)
        assert code == 0, served.text()
    from refold.store import open_store

    store = open_store(pg_db)
    try:
        check_run(store, up, history, sent)
    finally:
        store.close()
