"""An appended row's stored JSON reuses the canonical text its identity hashed when that text
is the whole message (``identity_and_json``): the stored bytes and the identities stay exactly
what encoding each again gives, for every shape of message (private, null, non-identity keys,
lone surrogates, non-ASCII, nested parts)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from refold.messages.model import (
    canonical_json,
    identity_and_json,
    message_identity,
    wire_form,
)
from refold.store.sqlite import SQLiteStore
from refold.store.sqlite.rows import encode_json

values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
                      | st.text(), lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=6)
messages = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "tool", "system"])},
    optional={"content": st.none() | st.text() | st.lists(st.fixed_dictionaries(
        {"type": st.just("text"), "text": st.text()}), max_size=2),
        "name": st.none() | st.text(max_size=5), "tool_call_id": st.text(max_size=5),
        "tool_calls": st.lists(st.fixed_dictionaries({
            "id": st.text(max_size=4),
            "function": st.fixed_dictionaries({"name": st.text(max_size=4),
                                               "arguments": st.text()})}), max_size=2),
        "reasoning_content": st.text(max_size=5), "_private": values, "extra": values})


@settings(max_examples=300, deadline=None)
@given(messages, st.none() | st.text(max_size=8))
def test_identity_and_json_is_the_identity_and_the_wire_forms_json(
        message: dict[str, Any], previous: str | None) -> None:
    identity, text = identity_and_json(message, previous)
    assert identity == message_identity(message, previous)
    if text is not None:
        assert text == canonical_json(wire_form(message))


def test_stored_rows_are_byte_for_byte_what_encoding_gives(tmp_path: Path) -> None:
    batch: list[dict[str, Any]] = [
        {"role": "user", "content": "plain"},
        {"role": "user", "content": "lone \ud800 surrogate"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "assistant", "content": "ünïcødé 部署", "reasoning_content": "why"},
        {"role": "user", "content": [{"type": "text", "text": "parts"}], "_note": 1},
        {"role": "tool", "tool_call_id": "c1", "content": "1.5e-7", "name": "f"},
    ]
    store = SQLiteStore(str(tmp_path / "db.sqlite"))
    try:
        session = store.create_session(title="s")
        previous = None
        for message in batch:
            store.append_messages(session.id, [message])
        for message in batch[:2]:  # and two at a time
            store.append_messages(session.id, [message, dict(message)])
        stored = [m.identity for m in store.get_messages(session.id)]
        conn = store.db.conn
        rows = conn.execute("SELECT message, identity FROM messages WHERE session_id = ? "
                            "ORDER BY seq", (session.id,)).fetchall()
        sent = [*batch, batch[0], dict(batch[0]), batch[1], dict(batch[1])]
        for (body, identity), message in zip(rows, sent, strict=True):
            assert body == encode_json(wire_form(message))
            previous = message_identity(message, previous)
            assert identity == previous
        assert stored == [r[1] for r in rows]
    finally:
        store.close()
