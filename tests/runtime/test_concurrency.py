"""One engine, several sessions driven from several threads: nothing lost, nothing mixed."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from refold.runtime import Engine
from refold.runtime.branches import Diverge
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


@pytest.mark.parametrize("diverge", ["branch", "rewind"])
def test_two_processes_answering_the_same_turn_never_give_it_two_replies(
        store: Store, tmp_path: Path, diverge: Diverge) -> None:
    """Two serve workers (here two engines on one ledger) prepare the same turn before either
    records: the second reply found the first after its question and was appended after it
    (one question, two replies in a row: a chain no client sent). It now goes where a request
    re-sending that history would: a branch of a derived session, or after a reversible
    rewind of a named one (the last writer's answer is the session's)."""
    engines = [Engine(store, model="gpt-4o-mini", context_length=WINDOW,
                      memory_dir=tmp_path / f"memories-{n}") for n in range(2)]
    first = engines[0].open_session(new=True, title="conversation")
    second = engines[1].open_session(first.session_id)
    history: list[dict[str, Any]] = [{"role": "user", "content": "hello"}]
    first.prepare_history(history, diverge=diverge)
    first.record({"role": "assistant", "content": "hi"})
    history += [{"role": "assistant", "content": "hi"},
                {"role": "user", "content": "second question"}]
    first.prepare_history(list(history), diverge=diverge)
    second.prepare_history(list(history), diverge=diverge)
    first.record({"role": "assistant", "content": "answer A"})
    second.record({"role": "assistant", "content": "answer B"})
    for engine in engines:
        engine.close()
    asked = ["hello", "hi", "second question"]

    def active(session_id: str) -> list[str]:
        return [str(r.message["content"]) for r in store.get_messages(session_id)]

    if diverge == "rewind":
        assert second.session_id == first.session_id
        assert active(first.session_id) == [*asked, "answer B"]
        every = store.get_messages(first.session_id, include_inactive=True)
        assert [r.message["content"] for r in every if not r.active] == ["answer A"]
        assert store.list_rewinds(first.session_id)  # reversible
    else:
        assert active(first.session_id) == [*asked, "answer A"]
        assert second.session_id != first.session_id
        assert active(second.session_id) == [*asked, "answer B"]
    # whatever happened, the next turn of the second process continues from its own answer
    follow = [*history, {"role": "assistant", "content": "answer B"},
              {"role": "user", "content": "third"}]
    again = Engine(store, model="gpt-4o-mini", context_length=WINDOW,
                   memory_dir=tmp_path / "memories-2").open_session(second.session_id)
    sent = again.prepare_history(follow, diverge=diverge)
    assert [m["content"] for m in sent.messages if m["role"] != "system"] == [
        *asked, "answer B", "third"]


def test_another_process_storing_a_conversation_that_opens_alike_mid_placement(
        store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two serve processes, two unnamed conversations that open with the same stored turn,
    each sending its own next question at the same moment: the other process stores its
    question between this one's placing of the history (it extends the session) and its
    write. That write rewound the other's question as a divergent tail (the other client then
    got a 409); it is placed again instead, and goes to a branch. Both answered, nothing
    rewound, each question stored once, in the session that answers it."""
    import refold.runtime.session as session_module

    engines = [Engine(store, model="gpt-4o-mini", context_length=WINDOW,
                      memory_dir=tmp_path / f"memories-{n}") for n in range(2)]
    opening: list[dict[str, Any]] = [{"role": "user", "content": "hello"}]
    second = engines[1].open_session(new=True, title="derived")
    second.prepare_history(list(opening), diverge="branch")
    second.record({"role": "assistant", "content": "hi"})
    opening.append({"role": "assistant", "content": "hi"})
    first = engines[0].open_session(second.session_id)  # (knows no chain: the full path)
    derived = second.session_id
    mine = [*opening, {"role": "user", "content": "question A"}]
    theirs = [*opening, {"role": "user", "content": "question B"}]
    placed = session_module.place
    interleaved: list[bool] = []

    def place_then_the_other_stores(*args: Any, **kwargs: Any) -> Any:
        found = placed(*args, **kwargs)
        if not interleaved:  # the other process, between this placement and its write
            interleaved.append(True)
            second.prepare_history(list(theirs), diverge="branch")
            second.record({"role": "assistant", "content": "answer B"})
        return found

    monkeypatch.setattr(session_module, "place", place_then_the_other_stores)
    sent = first.prepare_history(list(mine), diverge="branch")
    monkeypatch.setattr(session_module, "place", placed)
    assert [m["content"] for m in sent.messages if m["role"] != "system"] == [
        "hello", "hi", "question A"]
    first.record({"role": "assistant", "content": "answer A"})
    for engine in engines:
        engine.close()

    def contents(session_id: str, inactive: bool = False) -> list[str]:
        return [str(r.message["content"]) for r in store.get_messages(
            session_id, include_inactive=inactive)]

    assert interleaved
    assert second.session_id == derived
    assert contents(derived) == ["hello", "hi", "question B", "answer B"]
    assert first.session_id != derived
    assert contents(first.session_id) == ["hello", "hi", "question A", "answer A"]
    assert not any(r.seqs for s in store.list_sessions() for r in store.list_rewinds(s.id))
    for sid in {first.session_id, second.session_id}:  # nothing stored inactive either
        assert contents(sid, inactive=True) == contents(sid)


def test_a_named_session_begun_by_two_processes_at_once_rewinds_neither(
        store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two serve processes, one new ``X-Refold-Session`` name, two different first messages at
    the same moment: the other process stores its opening after this one read the session
    empty and before this one's write. The write went through (an empty session had no tip to
    expect) and rewound the other's opening; that client then got a 409 for its answered turn.
    Now the write expects an empty session, the history is placed again, and shares nothing
    with the named conversation: it goes to a branch."""
    engines = [Engine(store, model="gpt-4o-mini", context_length=WINDOW,
                      memory_dir=tmp_path / f"memories-{n}") for n in range(2)]
    mine = engines[0].open_session(new=True, title="cr1")
    theirs = engines[1].open_session("cr1")
    named = mine.session_id
    write = store.sync_messages
    interleaved: list[bool] = []

    def the_other_stores_first(*args: Any, **kwargs: Any) -> Any:
        if not interleaved:  # the other process, between this one's read and its write
            interleaved.append(True)
            theirs.prepare_history([{"role": "user", "content": "other opening"}],
                                   diverge="rewind")
            theirs.record({"role": "assistant", "content": "answer B"})
        return write(*args, **kwargs)

    monkeypatch.setattr(store, "sync_messages", the_other_stores_first)
    mine.prepare_history([{"role": "user", "content": "same opening"}], diverge="rewind")
    monkeypatch.setattr(store, "sync_messages", write)
    mine.record({"role": "assistant", "content": "answer A"})
    for engine in engines:
        engine.close()

    def contents(session_id: str, inactive: bool = False) -> list[str]:
        return [str(r.message["content"]) for r in store.get_messages(
            session_id, include_inactive=inactive)]

    assert interleaved and theirs.session_id == named
    assert contents(named, inactive=True) == ["other opening", "answer B"]
    assert mine.session_id != named
    assert contents(mine.session_id, inactive=True) == ["same opening", "answer A"]
    assert not any(r.seqs for s in store.list_sessions() for r in store.list_rewinds(s.id))


def test_a_retry_racing_its_twin_on_another_worker_is_placed_again(
        store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same request twice at once on two workers (a client's retry while its first try is
    in flight), a named session: both see the stored reply after the question and rewind it;
    the second rewind found the row already rewound and the client got a 400 ("no active
    message"). Now the history is placed again, and the turn goes on."""
    from refold.runtime import branches

    engine = Engine(store, model="gpt-4o-mini", context_length=WINDOW,
                    memory_dir=tmp_path / "memories")
    rt = engine.open_session(new=True, title="named")
    asked = [{"role": "user", "content": "first"}]
    rt.prepare_history(list(asked), diverge="rewind")
    rt.record({"role": "assistant", "content": "answer"})
    rewind = store.rewind
    raced: list[bool] = []

    def the_twin_rewinds_first(session_id: str, from_seq: int, **kw: Any) -> Any:
        if not raced:  # the other worker, between this one's read and its rewind
            raced.append(True)
            rewind(session_id, from_seq, **kw)
        return rewind(session_id, from_seq, **kw)

    monkeypatch.setattr(store, "rewind", the_twin_rewinds_first)
    again = engine.open_session(rt.session_id)  # the other worker's runtime: no known chain
    sent = again.prepare_history(list(asked), diverge="rewind")
    monkeypatch.setattr(store, "rewind", rewind)
    assert raced
    assert [m["content"] for m in sent.messages if m["role"] != "system"] == ["first"]
    assert again.session_id == rt.session_id  # no branch of the named session
    assert [r.message["content"] for r in store.get_messages(rt.session_id)] == ["first"]
    assert branches.PLACE_ATTEMPTS > 1
    engine.close()
