"""Conformance: ``expect_last=""`` means "the session has no active row" (every backend), so a
writer that read a session empty never writes over another writer's first rows."""

from __future__ import annotations

import pytest

from refold.errors import Conflict
from refold.store import Store

HELLO = [{"role": "user", "content": "hello"}]


def test_an_empty_session_is_expected_empty(store: Store) -> None:
    s = store.create_session()
    assert len(store.sync_messages(s.id, HELLO, expect_last="").appended) == 1
    with pytest.raises(Conflict):  # not empty any more: nothing written, nothing rewound
        store.sync_messages(s.id, [{"role": "user", "content": "other"}], expect_last="")
    with pytest.raises(Conflict):
        store.append_messages(s.id, [{"role": "user", "content": "other"}], expect_last="")
    assert [m.message["content"] for m in store.get_messages(s.id, include_inactive=True)] == \
        ["hello"]
    t = store.create_session()
    assert len(store.append_messages(t.id, HELLO, expect_last="").appended) == 1
    store.rewind(t.id, 1, any_role=True)  # no active row again
    assert len(store.append_messages(t.id, HELLO, expect_last="").appended) == 1
