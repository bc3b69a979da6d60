"""A client's sliding window that slides on (``refold.runtime.slides.WindowSlides``).

Agents that trim their history (the system message and the last N messages) send a request that
starts a little later each turn. Once the full path has placed such a window, the next one is the
window this runtime stored last without its first messages, then new ones: the runtime appends
only the new ones and keeps its view (its first rows dropped) instead of reading and matching the
session's tail again, and it can do so in light mode, on the proxy's event loop. Everything here
is checked against a twin runtime on another store that always takes the full path: the same
messages go upstream and the same rows are stored, turn by turn.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from refold.runtime import Engine
from refold.runtime.prepared import Prepared
from refold.runtime.session import SessionRuntime
from refold.store import Store
from refold.store.sqlite import SQLiteStore

from ._helpers import tool_turn

SYSTEM = "You are a careful assistant."
WIDE = 200_000  # no compaction in these turns


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def bot(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


@pytest.fixture
def engines() -> Iterator[list[Engine]]:
    made: list[Engine] = []
    yield made
    for engine in made:
        engine.close()


def pair(engines: list[Engine], store: Store, twin_store: Store
         ) -> tuple[SessionRuntime, SessionRuntime]:
    """A runtime, and its twin that never takes the window fast path."""
    made = [Engine(s, model="gpt-4o-mini", context_length=WIDE, background_precompact=False)
            for s in (store, twin_store)]
    engines.extend(made)
    rt, twin = (e.open_session(None, new=True, title="slide") for e in made)
    twin.slides.sync_known = lambda history: False  # type: ignore[method-assign]
    return rt, twin


def trimmed(history: list[dict[str, Any]], last: int) -> list[dict[str, Any]]:
    """The system message and the last ``last`` messages, starting on a user message."""
    rest = history[1:][-last:]
    while rest and rest[0]["role"] != "user":
        rest = rest[1:]
    return history[:1] + rest


def rows(store: Store, session_id: str) -> list[tuple[Any, ...]]:
    return [(r.message.get("role"), r.message.get("content"), r.message.get("tool_call_id"),
             r.active) for r in store.get_messages(session_id, include_inactive=True)]


def turn(rt: SessionRuntime, twin: SessionRuntime, request: list[dict[str, Any]],
         light: list[bool]) -> Prepared:
    """One turn as the proxy runs it (light first, then the worker call), and the twin's."""
    prepared = rt.inline.prepare(request)
    light.append(prepared is not None)
    if prepared is None:
        prepared = rt.prepare_history(request, diverge="branch")
    expected = twin.prepare_history(request, diverge="branch")
    assert prepared.messages == expected.messages
    assert prepared.tokens == expected.tokens
    return prepared


def reply_both(rt: SessionRuntime, twin: SessionRuntime, reply: dict[str, Any]) -> None:
    if not rt.inline.record(reply):
        assert rt.record(reply) is True
    assert twin.record(reply) is True


def converse(rt: SessionRuntime, twin: SessionRuntime, turns: int, last: int,
             light: list[bool]) -> list[dict[str, Any]]:
    """``turns`` question-and-answer turns of a client sending its last ``last`` messages
    (both runtimes); the whole history, system message first."""
    history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    for i in range(turns):
        history.append(user(f"question {i}"))
        prepared = turn(rt, twin, trimmed(history, last), light)
        assert prepared.messages[-1]["content"] == f"question {i}"
        reply_both(rt, twin, bot(f"answer {i}"))
        history.append(bot(f"answer {i}"))
    return history


@pytest.mark.parametrize("last", [4, 7, 12])
def test_a_window_sliding_on_is_stored_once_and_sent_as_the_full_path_sends_it(
        engines: list[Engine], normal_store: SQLiteStore, twin_store: Store, last: int) -> None:
    rt, twin = pair(engines, normal_store, twin_store)
    light: list[bool] = []
    history = converse(rt, twin, 18, last, light)
    assert rows(normal_store, rt.session_id) == rows(twin_store, twin.session_id)
    assert [r[1] for r in rows(normal_store, rt.session_id)] == [
        text for i in range(18) for text in (f"question {i}", f"answer {i}")]
    # the first slide is placed by the full path (a worker); every later one is light, and
    # reads no projection: the view is kept with its first rows dropped
    first_slide = next(i for i in range(18) if 2 * i + 1 > last)
    assert light[first_slide + 1:] == [True] * (17 - first_slide)
    reads = rt.mirror.view_reads
    history.append(user("one more"))
    turn(rt, twin, trimmed(history, last), light)
    assert rt.mirror.view_reads == reads


def test_a_window_sliding_by_whole_tool_loops_keeps_calls_and_results_paired(
        engines: list[Engine], normal_store: SQLiteStore, twin_store: Store) -> None:
    rt, twin = pair(engines, normal_store, twin_store)
    history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    light: list[bool] = []
    for i in range(10):
        ask, call, result = tool_turn(i, size=60)
        history.append(ask)
        turn(rt, twin, trimmed(history, 9), light)
        reply_both(rt, twin, call)
        history += [call, result]
        prepared = turn(rt, twin, trimmed(history, 9), light)  # the result: a new message
        sent = prepared.messages
        assert sent[-1]["role"] == "tool" and sent[-2]["tool_calls"][0]["id"] == f"call_{i}"
        answer = bot(f"module {i} fixed")
        reply_both(rt, twin, answer)
        history.append(answer)
    assert rows(normal_store, rt.session_id) == rows(twin_store, twin.session_id)
    assert len(rows(normal_store, rt.session_id)) == 40  # each message once
    assert light[-6:] == [True] * 6


def test_what_the_fast_path_leaves_to_the_full_path_ends_as_the_full_path_does(
        engines: list[Engine], normal_store: SQLiteStore, twin_store: Store) -> None:
    rt, twin = pair(engines, normal_store, twin_store)
    light: list[bool] = []
    history = converse(rt, twin, 8, 6, light)
    window = trimmed(history, 6)
    # the same window again (a retry: nothing new), then one whose system prompt changed,
    # then one that re-spells the last reply with SDK extras: none of it stored twice
    turn(rt, twin, window, light)
    changed = [{"role": "system", "content": "You are terse."}, *window[1:], user("q8")]
    turn(rt, twin, changed, light)
    reply_both(rt, twin, bot("answer 8"))
    respelled = [*changed[:-1], {**changed[-1]}, {**bot("answer 8"), "refusal": None},
                 user("q9")]
    turn(rt, twin, trimmed(respelled, 6), light)
    assert rows(normal_store, rt.session_id) == rows(twin_store, twin.session_id)
    contents = [r[1] for r in rows(normal_store, rt.session_id) if r[3]]
    assert len(contents) == len(set(contents))


def test_another_writer_between_two_slides_sends_the_turn_to_the_full_path(
        engines: list[Engine], normal_store: SQLiteStore, twin_store: Store) -> None:
    rt, twin = pair(engines, normal_store, twin_store)
    light: list[bool] = []
    history = converse(rt, twin, 6, 4, light)
    # another process answered the same turn meanwhile: the tail this runtime knows moved
    normal_store.append_messages(rt.session_id, [bot("another process's note")])
    history.append(user("question 6"))
    before = len(rows(normal_store, rt.session_id))
    assert rt.inline.prepare(trimmed(history, 4)) is None  # the full path's to place
    assert len(rows(normal_store, rt.session_id)) == before  # nothing stored by the try
    prepared = rt.prepare_history(trimmed(history, 4), diverge="branch")
    assert prepared.messages[-1]["content"] == "question 6"
    stored = [r.message.get("content") for r in normal_store.get_messages(rt.session_id)]
    assert stored.count("question 6") == 1


def test_on_postgres_the_window_slides_on_without_reading_the_tail_again(
        engines: list[Engine], postgres_store: Store, twin_store: Store) -> None:
    rt, twin = pair(engines, postgres_store, twin_store)
    history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    reads: list[int] = []
    for i in range(12):
        history.append(user(f"question {i}"))
        turn(rt, twin, trimmed(history, 6), [])
        reads.append(rt.mirror.view_reads)
        reply_both(rt, twin, bot(f"answer {i}"))
        history.append(bot(f"answer {i}"))
    assert rows(postgres_store, rt.session_id) == rows(twin_store, twin.session_id)
    assert len(set(reads[-6:])) == 1  # (the worker path: no projection read per slide)


def test_a_window_bringing_many_new_messages_at_once_is_left_to_the_full_path(
        engines: list[Engine], normal_store: SQLiteStore, twin_store: Store) -> None:
    from refold.runtime.mirror import NEW_AT_MOST

    rt, twin = pair(engines, normal_store, twin_store)
    light: list[bool] = []
    history = converse(rt, twin, 6, 4, light)
    burst = [user(f"pasted line {n}") for n in range(NEW_AT_MOST + 1)]
    request = [history[0], *history[-2:], *burst]  # the window slid by two, and a burst
    assert not rt.slides.slides_on(request)
    turn(rt, twin, request, light)
    assert light[-1] is False  # placed by the full path: a window all the same
    assert rows(normal_store, rt.session_id) == rows(twin_store, twin.session_id)
    assert [r[1] for r in rows(normal_store, rt.session_id)][-len(burst):] == [
        m["content"] for m in burst]
    reply_both(rt, twin, bot("answer 6"))
    history += [*burst, bot("answer 6"), user("question 7")]
    assert rt.slides.slides_on(trimmed(history, 4))  # and the next window slides on again
    turn(rt, twin, trimmed(history, 4), light)
    assert light[-1] is True
