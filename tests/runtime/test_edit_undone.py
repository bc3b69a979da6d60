"""A named session's edit undone by the client: the history it re-sends brings back the rows
the edit rewound instead of storing them again (both backends).

A user edits a message (the proxy rewinds the stored tail reversibly and stores the edit), then
goes back to the original conversation — an editor's undo, a client that re-sends the history
it kept. The ledger holds each message the client sent once: the original rows come back
active (``Store.undo_rewind``'s swap), the edit's rows are held by a rewind in turn.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from refold.runtime import Engine
from refold.store import Store


@pytest.fixture
def eng(store: Store, tmp_path: Path) -> Iterator[Engine]:
    engine = Engine(store, model="gpt-4o-mini", context_length=100_000,
                    memory_dir=tmp_path / "memories", background_precompact=False)
    yield engine
    engine.close()


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def bot(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def turn(eng: Engine, history: list[dict[str, Any]], reply: str) -> list[dict[str, Any]]:
    rt = eng.open_session("work", by_prefix=False) if _exists(eng) else eng.open_session(
        new=True, title="work")
    prepared = rt.prepare_history([dict(m) for m in history], diverge="rewind")
    sent = [m for m in prepared.messages if m["role"] != "system"]
    assert sent == history  # what goes upstream is what was sent
    rt.record(bot(reply))
    return [*history, bot(reply)]


def _exists(eng: Engine) -> bool:
    return any(s.title == "work" for s in eng.store.list_sessions())


def texts(store: Store, session_id: str, inactive: bool = False) -> list[str]:
    return [r.message["content"] for r in store.get_messages(session_id,
                                                             include_inactive=inactive)]


def test_going_back_to_the_original_after_an_edit_restores_it_stored_once(
        eng: Engine, store: Store) -> None:
    original = turn(eng, [user("u1")], "a1")
    original = turn(eng, [*original, user("u2")], "a2")
    edited = turn(eng, [*original[:2], user("u2 edited")], "a2 edited")
    assert edited[-2:] == [user("u2 edited"), bot("a2 edited")]
    # back to the original, and on from it
    final = turn(eng, [*original, user("u3")], "a3")
    sid = next(s.id for s in store.list_sessions() if s.title == "work")
    assert texts(store, sid) == [m["content"] for m in final]
    every = Counter(texts(store, sid, inactive=True))
    assert every == Counter(["u1", "a1", "u2", "a2", "u2 edited", "a2 edited", "u3", "a3"])
    # and the edit can come back the same way: nothing stored twice either
    again = turn(eng, [*edited, user("u3 after the edit")], "a3b")
    assert texts(store, sid) == [m["content"] for m in again]
    assert max(Counter(texts(store, sid, inactive=True)).values()) == 1


def test_going_back_to_part_of_the_original_rewinds_the_rest_of_it(
        eng: Engine, store: Store) -> None:
    """The restored rows go further than the history re-sent: what it leaves out of them is
    rewound again, and what it adds is appended after them."""
    h = turn(eng, [user("u1")], "a1")
    h = turn(eng, [*h, user("u2")], "a2")
    h = turn(eng, [*h, user("u3")], "a3")
    turn(eng, [*h[:2], user("u2 edited")], "a2 edited")
    final = turn(eng, [*h[:4], user("u3 other")], "a3 other")
    sid = next(s.id for s in store.list_sessions() if s.title == "work")
    assert texts(store, sid) == [m["content"] for m in final]
    assert max(Counter(texts(store, sid, inactive=True)).values()) == 1
