"""Conformance: ``window_candidates`` (every backend), the lookup behind sliding windows.

The sessions of one owner holding one of the given replies as an active assistant row, the one
that stored such a row last first; other owners' sessions, rewound rows and rows of other
roles are never candidates.
"""

from __future__ import annotations

from typing import Any

from refold.store import Store


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def bot(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def test_candidates_are_the_owners_sessions_holding_the_reply(store: Store) -> None:
    older = store.create_session(owner="a").id
    newer = store.create_session(owner="a").id
    other_owner = store.create_session(owner="b").id
    as_user = store.create_session(owner="a").id
    store.append_messages(older, [user("hi"), bot("The answer is 42.")])
    store.append_messages(other_owner, [user("hi"), bot("The answer is 42.")])
    store.append_messages(as_user, [user("The answer is 42."), bot("ok")])
    store.append_messages(newer, [user("hey"), bot("The answer is 42.")])

    found = store.window_candidates("a", [bot("The answer is 42."), bot("unknown")])
    assert found == [newer, older]
    assert store.window_candidates("b", [bot("The answer is 42.")]) == [other_owner]
    assert store.window_candidates("a", [user("The answer is 42.")]) == []  # not a reply
    assert store.window_candidates("a", [bot("The answer is 42.")], limit=1) == [newer]


def test_a_long_reply_is_found_by_its_start_and_a_rewound_one_is_not(store: Store) -> None:
    session = store.create_session(owner="").id
    long = "word " * 200 + "end"
    rows = store.append_messages(session, [user("q"), bot(long), user("again"),
                                           bot("rewound reply")]).appended
    assert store.window_candidates("", [bot(long)]) == [session]
    store.rewind(session, rows[3].seq, any_role=True)
    assert store.window_candidates("", [bot("rewound reply")]) == []
    assert store.window_candidates("", []) == []
