"""Conformance: export of a session or its lineage as JSONL / JSON / Markdown (every backend)."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from refold.errors import InvalidInput, NotFound
from refold.store import Store
from refold.store.export import export_text, write_export


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def bot(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


CALL = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]}
RESULT = {"role": "tool", "tool_call_id": "c1", "content": "file.txt"}


def test_jsonl_is_one_wire_message_per_line(store: Store) -> None:
    s = store.create_session()
    history = [user("hi 你好"), CALL, RESULT, bot("done")]
    store.append_messages(s.id, history)
    lines = export_text(store, s.id, "jsonl").splitlines()
    assert [json.loads(line) for line in lines] == history


def test_jsonl_round_trips_through_sync(store: Store) -> None:
    s = store.create_session()
    store.append_messages(s.id, [user("a"), bot("b"), user("c")])
    lines = export_text(store, s.id).splitlines()
    again = store.create_session()
    store.sync_messages(again.id, [json.loads(line) for line in lines])
    assert [m.identity for m in store.get_messages(again.id)] == [
        m.identity for m in store.get_messages(s.id)]


def test_inactive_rows_only_on_request(store: Store) -> None:
    s = store.create_session()
    store.append_messages(s.id, [user("a"), bot("b"), user("c"), bot("d")])
    store.rewind(s.id, 3)
    assert len(export_text(store, s.id).splitlines()) == 2
    assert len(export_text(store, s.id, include_inactive=True).splitlines()) == 4
    doc = json.loads(export_text(store, s.id, "json", include_inactive=True))
    assert [m["active"] for m in doc["sessions"][0]["messages"]] == [True, True, False, False]
    assert "rewound" in export_text(store, s.id, "markdown", include_inactive=True)


def test_json_has_session_metadata_and_message_records(store: Store) -> None:
    s = store.create_session(title="ops", source="cli")
    store.append_messages(s.id, [user("a")], token_counts=[5])
    doc = json.loads(export_text(store, s.id, "json"))
    assert doc["format"] == "refold.export/1"
    [session] = doc["sessions"]
    assert (session["id"], session["title"], session["source"]) == (s.id, "ops", "cli")
    [message] = session["messages"]
    assert message["seq"] == 1 and message["token_count"] == 5
    assert message["message"] == user("a") and message["identity"]


def test_markdown_is_readable(store: Store) -> None:
    s = store.create_session(title="Build 🚀")
    store.append_messages(s.id, [user("list files"), CALL, RESULT, bot("one file")])
    text = export_text(store, s.id, "markdown")
    assert text.startswith("# Build 🚀")
    assert "## 1 · user" in text and "list files" in text
    assert "Tool call `c1`: `ls`" in text and "Result of tool call `c1`" in text


def test_lineage_export_covers_ancestors_without_duplicates(store: Store) -> None:
    root = store.create_session(title="root")
    store.append_messages(root.id, [user("r1"), bot("r2")])
    cont = store.create_session(parent_session_id=root.id, link_kind="compaction")
    store.append_messages(cont.id, [user("c1"), bot("c2"), user("c3")])
    fork = store.fork_session(cont.id, 2)
    store.append_messages(fork.id, [user("f1")])
    only = [json.loads(x)["content"] for x in export_text(store, fork.id).splitlines()]
    assert only == ["c1", "c2", "f1"]
    full = [json.loads(x)["content"]
            for x in export_text(store, fork.id, lineage=True).splitlines()]
    assert full == ["r1", "r2", "c1", "c2", "f1"]
    doc = json.loads(export_text(store, cont.id, "json", lineage=True))
    assert [s["id"] for s in doc["sessions"]] == [root.id, cont.id]


def test_write_export_streams_and_counts(store: Store) -> None:
    s = store.create_session()
    store.append_messages(s.id, [user(str(i)) for i in range(1100)])
    out = io.StringIO()
    assert write_export(store, s.id, out, "jsonl") == 1100
    assert len(out.getvalue().splitlines()) == 1100


def test_export_errors(store: Store) -> None:
    s = store.create_session()
    with pytest.raises(InvalidInput):
        export_text(store, s.id, "xml")
    with pytest.raises(NotFound):
        export_text(store, "ghost")


def test_export_survives_lone_surrogates(store: Store) -> None:
    s = store.create_session()
    store.append_messages(s.id, [user("bad \udcff byte")])
    line = export_text(store, s.id).strip()
    line.encode("utf-8")
    assert json.loads(line)["content"] == "bad \udcff byte"
