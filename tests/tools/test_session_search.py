"""session_search: discover, scroll, read, browse — never the current session's own rows."""

from __future__ import annotations

import json
from typing import Any

import pytest

from refold.store import Store
from refold.tools import ToolRegistry, session_search_tool


def _conversation(topic: str, extra: str = "") -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": f"please look at {topic}"},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "c1", "type": "function",
            "function": {"name": "terminal", "arguments": '{"cmd": "pytest -q"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": f"FAILED tests/test_{topic}.py {extra}"},
        {"role": "assistant", "content": f"The {topic} test fails because of a timezone bug."},
        {"role": "user", "content": "谢谢，请用中文回答。数据库迁移怎么样了？"},
        {"role": "assistant", "content": "数据库迁移已经完成。"},
    ]


@pytest.fixture
def sessions(store: Store) -> dict[str, str]:
    old = store.create_session(title="old work")
    store.append_messages(old.id, _conversation("parser", "AssertionError: 3 != 4"))
    current = store.create_session(title="current")
    store.append_messages(current.id, _conversation("parser", "current session row"))
    other = store.create_session(title="tenant b", owner="b")
    store.append_messages(other.id, _conversation("parser", "secret of tenant b"))
    return {"old": old.id, "current": current.id, "other": other.id}


def _call(store: Store, current: str | None, **args: Any) -> dict[str, Any]:
    registry = ToolRegistry([session_search_tool(store, current_session_id=current, owner="")])
    result = registry.run("session_search", args)
    out = json.loads(result.text)
    out["_error"] = result.is_error
    return out


def test_search_excludes_current_session_and_other_owners(store: Store,
                                                          sessions: dict[str, str]) -> None:
    out = _call(store, sessions["current"], query="parser")
    found = {g["session_id"] for g in out["sessions"]}
    assert found == {sessions["old"]}
    text = json.dumps(out, ensure_ascii=False)
    assert "current session row" not in text and "secret of tenant b" not in text


def test_from_a_fork_its_own_copies_are_not_past_sessions(store: Store) -> None:
    """A fork holds copies of its parent's messages up to where it forked: searched from the
    fork they came back as the parent's hits (the current conversation's own words as a
    "past session"). What the parent said after the fork point still comes back."""
    parent = store.create_session(title="orig")
    store.append_messages(parent.id, [
        {"role": "user", "content": "pick a name for the flux capacitor module"},
        {"role": "assistant", "content": "call it zeta9"}])
    fork = store.fork_session(parent.id)
    store.append_messages(parent.id, [
        {"role": "user", "content": "and the zeta9 tests?"},
        {"role": "assistant", "content": "zeta9 tests pass"}])
    out = _call(store, fork.id, query="zeta9", window=0)
    found = sorted((g["session_id"], m["seq"]) for g in out["sessions"] for m in g["matches"])
    assert found == [(parent.id, 3), (parent.id, 4)], out
    out = _call(store, parent.id, query="zeta9", window=0)  # and the other way round
    assert out["hits"] == 0, out


def test_search_hits_carry_an_anchored_window(store: Store, sessions: dict[str, str]) -> None:
    out = _call(store, sessions["current"], query="AssertionError", window=1)
    group = out["sessions"][0]
    seqs = [row["seq"] for row in group["window"]]
    hit_seq = group["matches"][0]["seq"]
    assert hit_seq in seqs and len(seqs) >= 2
    assert any(row.get("hit") for row in group["window"])


@pytest.mark.parametrize("query", ["数据库迁移", "迁移", "timezone"])
def test_search_cjk_and_english(store: Store, sessions: dict[str, str], query: str) -> None:
    out = _call(store, sessions["current"], query=query)
    assert [g["session_id"] for g in out["sessions"]] == [sessions["old"]]


def test_around_read_and_recent(store: Store, sessions: dict[str, str]) -> None:
    around = _call(store, sessions["current"], mode="around", session_id=sessions["old"],
                   seq=3, window=1)
    assert [m["seq"] for m in around["messages"]] == [2, 3, 4]
    assert next(m for m in around["messages"] if m.get("hit"))["seq"] == 3
    page = _call(store, sessions["current"], mode="read", session_id="old work", limit=4)
    assert len(page["messages"]) == 4 and "next_start_seq" in page
    rest = _call(store, sessions["current"], mode="read", session_id=sessions["old"],
                 start_seq=page["next_start_seq"])
    assert len(rest["messages"]) == 2 and "next_start_seq" not in rest
    recent = _call(store, sessions["current"], mode="recent")
    ids = [s["session_id"] for s in recent["sessions"]]
    assert ids == [sessions["old"]]
    assert recent["sessions"][0]["preview"].startswith("please look at parser")


def test_current_session_and_foreign_sessions_are_refused(store: Store,
                                                          sessions: dict[str, str]) -> None:
    own = _call(store, sessions["current"], mode="read", session_id=sessions["current"])
    assert own["_error"] and "current session" in own["error"]
    foreign = _call(store, sessions["current"], mode="read", session_id=sessions["other"])
    assert foreign["_error"]


@pytest.mark.parametrize("args", [{"mode": "search"}, {"mode": "bogus"},
                                  {"mode": "around", "session_id": "x"},
                                  {"query": "C++ (problem AND"}])
def test_bad_arguments_never_raise(store: Store, sessions: dict[str, str],
                                   args: dict[str, Any]) -> None:
    out = _call(store, sessions["current"], **args)
    assert out["_error"] or "sessions" in out


def test_current_session_may_be_a_getter(store: Store, sessions: dict[str, str]) -> None:
    current = {"id": sessions["current"]}
    registry = ToolRegistry([session_search_tool(store, current_session_id=lambda: current["id"],
                                                 owner="")])
    found = json.loads(registry.call("session_search", {"query": "parser"}))
    assert {g["session_id"] for g in found["sessions"]} == {sessions["old"]}
    current["id"] = sessions["old"]  # the runtime moved on: now "old" is the current one
    found = json.loads(registry.call("session_search", {"query": "parser"}))
    assert {g["session_id"] for g in found["sessions"]} == {sessions["current"]}


def test_the_developer_role_filters_as_the_cli_does(store: Store) -> None:
    """``refold search --role developer`` worked; the tool (MCP's too) and the HTTP endpoint
    refused it."""
    s = store.create_session(title="dev")
    store.append_messages(s.id, [{"role": "developer", "content": "Answer in haiku form."},
                                 {"role": "user", "content": "haiku about the sea"}])
    out = _call(store, None, query="haiku", role="developer")
    assert not out["_error"], out
    assert out["hits"] == 1 and "Answer in haiku form." in json.dumps(out)
