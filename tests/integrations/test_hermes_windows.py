"""The Hermes-Agent plugin with the window Hermes gives it, and with the shortened copies of
oversized messages a compress hands Hermes (both store backends; Hermes' real base classes).

Hermes sets up its memory provider before its context engine, and tells the engine its model's
window with ``update_model`` before ``on_session_start``; the memory provider opens the
database first, with refold's defaults, and the engine must still run on Hermes' window. After
a compress, Hermes carries on with refold's view, where an oversized message is a cut copy: the
next history it hands over must not store that copy as an edit of the message the user sent.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from refold.integrations.hermes import (
    Backend,
    RefoldContextEngine,
    RefoldMemoryProvider,
    backend_for,
)
from refold.store import SearchQuery, Store


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def bot(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def test_the_engine_runs_on_hermes_window_though_the_memory_provider_opened_the_db_first(
        tmp_path: Path) -> None:
    home = tmp_path / "hermes"
    memory, engine = RefoldMemoryProvider(), RefoldContextEngine()
    memory.initialize("sess-1", hermes_home=str(home))  # Hermes' order: memory first
    engine.update_model(model="gpt-4o-mini", context_length=64_000, provider="custom")
    engine.on_session_start("sess-1", hermes_home=str(home), model="gpt-4o-mini",
                            context_length=64_000)
    backend = backend_for(str(home / "refold" / "refold.db"))
    window = backend.runtime("sess-1")
    assert engine.context_length == 64_000
    assert engine.engine().ops.context_length == 64_000
    assert engine.threshold_tokens == int(engine.engine().ops.threshold) < 64_000
    # the memory provider's turns go to the same session, on the same window
    memory.sync_turn("hi", "hello", session_id="sess-1",
                     messages=[user("hi"), bot("hello")])
    assert backend.runtime("sess-1") is window
    assert [r.message["content"] for r in backend.engine.store.get_messages(
        window.session_id)] == ["hi", "hello"]
    # a model switch: the session goes on with the new window, nothing stored again
    engine.update_model(model="gpt-4o", context_length=32_000)
    assert engine.context_length == 32_000 and engine.engine().ops.context_length == 32_000
    assert engine.threshold_tokens == int(engine.engine().ops.threshold) < 32_000
    switched = backend.runtime("sess-1")
    assert switched.session_id == window.session_id
    memory.sync_turn("", "", session_id="sess-1",
                     messages=[user("hi"), bot("hello"), user("more"), bot("sure")])
    assert [r.message["content"] for r in backend.engine.store.get_messages(
        window.session_id)] == ["hi", "hello", "more", "sure"]
    for eng in backend.engines.values():
        eng.close()


@pytest.fixture
def backend(make_backend: Callable[[int], Backend]) -> Backend:
    return make_backend(64_000)


def big(word: str) -> str:
    return " ".join(f"{word}{i}" for i in range(9_000))


def test_a_cut_copy_hermes_hands_back_is_not_stored_as_an_edit(backend: Backend,
                                                                store: Store) -> None:
    engine = RefoldContextEngine(backend)
    engine.on_session_start("s1")
    history: list[dict[str, Any]] = []
    for question, answer in [("hello", "hi there"), ("second question", "second answer"),
                             (big("alpha"), "ok alpha"), (big("beta"), "ok beta")]:
        history += [user(question), bot(answer)]
    history.append(user(big("gamma")))
    view = engine.compress(history)
    assert any(len(str(m.get("content"))) < len(big("beta")) and
               str(m.get("content")).startswith("beta0") for m in view), \
        "the view no longer cuts the oversized message: this test needs another size"
    later = [*view, bot("ok gamma"), user("and then?")]
    RefoldMemoryProvider(backend).sync_turn("", "", session_id="s1", messages=later)
    engine.on_session_end("s1", later)  # the same history again: nothing new
    session = store.list_sessions()[0]
    every = store.get_messages(session.id, include_inactive=True)
    assert len(every) == len(history) + 2 and all(r.active for r in every)
    assert [r.message["content"] for r in every] == [m["content"] for m in history] + [
        "ok gamma", "and then?"]
    # the words at the end of the cut message are still found, once
    hits = store.search(SearchQuery("beta8999"))
    assert [h.seq for h in hits] == [7]
