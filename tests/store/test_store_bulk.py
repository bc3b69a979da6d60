"""Conformance: ``import_session`` / ``memory_documents`` (bulk copy for ``refold migrate``)."""

from __future__ import annotations

import dataclasses

from refold.store import CheckpointDraft, MemoryRow, SearchQuery, Store


def test_import_session_keeps_everything_and_is_searchable(store: Store) -> None:
    src = store.create_session(title="orig", source="cli")
    store.append_messages(src.id, [{"role": "user", "content": "hello 中文消息"},
                                   {"role": "assistant", "content": "reply"},
                                   {"role": "user", "content": "later"}], token_counts=[1, 2, 3])
    store.rewind(src.id, 3)
    store.add_checkpoint(src.id, CheckpointDraft("sum", 1, 1, 2, anchors=["a"]))
    store.append_event(src.id, "goal", {"g": 1})
    session = dataclasses.replace(store.get_session(src.id), id="copied", title="copy")
    messages = store.get_messages(src.id, include_inactive=True)
    assert store.import_session(session, iter(messages), store.list_checkpoints(src.id),
                                store.list_events(src.id))
    got = store.get_messages("copied", include_inactive=True)
    assert [(m.seq, m.identity, m.active, m.token_count, m.message) for m in got] == [
        (m.seq, m.identity, m.active, m.token_count, m.message) for m in messages]
    assert store.get_session("copied").message_count == 3
    assert [c.summary for c in store.list_checkpoints("copied")] == ["sum"]
    assert [e.payload for e in store.list_events("copied")] == [{"g": 1}]
    for text in ("中", "中文", "中文消息", "hello"):
        hits = {h.session_id for h in store.search(SearchQuery(text))}
        assert hits == {src.id, "copied"}, text
    # the copy continues its chain: appending after import gets the next seq
    assert store.append_messages("copied", [{"role": "user", "content": "x"}]).appended[0].seq == 4
    assert not store.import_session(session, [], [], [])  # existing id: skipped


def test_memory_documents(store: Store) -> None:
    assert store.memory_documents() == []
    store.memory_save("p2", "user", [MemoryRow("x", 1, 1)], 0)
    store.memory_save("p1", "memory", [], 0)
    assert store.memory_documents() == [("p1", "memory"), ("p2", "user")]
