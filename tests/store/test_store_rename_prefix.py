"""Conformance: a session cannot be renamed to the start of another session's id (4+ hex
digits): the title would shadow that id prefix, and ``show``/``rm``/``rename`` by it would be
refused as ambiguous."""

from __future__ import annotations

import pytest

from refold.errors import InvalidInput
from refold.store import Store


def test_a_title_that_starts_another_sessions_id_is_refused(store: Store) -> None:
    first, second = store.create_session(), store.create_session()
    prefix = second.id[:6]
    with pytest.raises(InvalidInput):
        store.rename_session(first.id, prefix)
    with pytest.raises(InvalidInput):
        store.rename_session(first.id, prefix.upper())
    assert store.get_session(first.id).title != prefix
    store.rename_session(second.id, prefix)  # its own id's start: no other session's
    store.rename_session(first.id, prefix + " notes")  # no id starts so
    assert store.get_session(first.id).title == prefix + " notes"
