"""The tool registry's dispatch contract and the ledger-backed todo tool."""

from __future__ import annotations

import json

import pytest

from refold.errors import InvalidInput
from refold.store import Store
from refold.tools import ToolRegistry, apply_todos, load_todos, todo_tool
from refold.tools.registry import Tool


def _echo_registry() -> ToolRegistry:
    def handler(args: dict) -> str:
        if args.get("fail"):
            raise InvalidInput("told to fail")
        return json.dumps(args)

    return ToolRegistry([Tool("echo", "echo args", {"type": "object"}, handler)])


def test_schema_is_openai_function_shape() -> None:
    schema = _echo_registry().schemas()[0]
    assert schema["type"] == "function"
    assert schema["function"]["name"] == "echo"
    assert schema["function"]["parameters"] == {"type": "object"}


def test_dispatch_answers_the_call_id() -> None:
    msg = _echo_registry().dispatch({"id": "call_1", "type": "function",
                                     "function": {"name": "echo", "arguments": '{"a": 1}'}})
    assert msg == {"role": "tool", "tool_call_id": "call_1", "content": '{"a": 1}'}


@pytest.mark.parametrize("name,arguments,needle", [
    ("nope", "{}", "unknown tool"),
    ("echo", "{not json", "not valid JSON"),
    ("echo", "[1, 2]", "JSON object"),
    ("echo", '{"fail": true}', "told to fail"),
])
def test_bad_calls_become_error_results(name: str, arguments: str, needle: str) -> None:
    result = _echo_registry().run(name, arguments)
    assert result.is_error
    assert needle in json.loads(result.text)["error"]


def test_duplicate_registration_is_refused() -> None:
    registry = _echo_registry()
    with pytest.raises(ValueError):
        registry.register(Tool("echo", "", {}, lambda a: ""))


def test_apply_todos_replace_and_merge() -> None:
    items = apply_todos([], [{"id": "1", "content": "fix tests"},
                             {"id": "2", "content": "add feature", "status": "pending"}], False)
    assert [t["status"] for t in items] == ["pending", "pending"]
    merged = apply_todos(items, [{"id": "1", "status": "completed"},
                                 {"id": "3", "content": "写文档"}], True)
    assert merged[0] == {"id": "1", "content": "fix tests", "status": "completed"}
    assert merged[2]["content"] == "写文档"
    with pytest.raises(InvalidInput):
        apply_todos(items, [{"id": "9", "status": "completed"}], True)
    with pytest.raises(InvalidInput):
        apply_todos(items, [{"id": "1", "content": "x", "status": "done"}], True)
    with pytest.raises(InvalidInput):
        apply_todos(items, "not a list", True)


def test_todo_state_lives_in_the_ledger(store: Store) -> None:
    session = store.create_session(title="todo")
    tool = todo_tool(store, session.id)
    out = json.loads(tool.handler({"todos": [{"id": "1", "content": "run pytest -q"},
                                             {"id": "2", "content": "fix flaky test"}]}))
    assert out["summary"]["pending"] == 2
    tool.handler({"todos": [{"id": "1", "status": "in_progress"}], "merge": True})
    # a fresh tool (a resumed process) rebuilds the same state from events
    again = json.loads(todo_tool(store, session.id).handler({}))
    assert again["todos"][0] == {"id": "1", "content": "run pytest -q", "status": "in_progress"}
    assert len(store.list_events(session.id, "todo")) == 2


def test_todo_state_follows_the_lineage(store: Store) -> None:
    parent = store.create_session(title="parent")
    store.append_messages(parent.id, [{"role": "user", "content": "hi"}])
    todo_tool(store, parent.id).handler({"todos": [{"id": "1", "content": "carry me"}]})
    child = store.fork_session(parent.id, kind="branch")
    assert load_todos(store, child.id)[0]["content"] == "carry me"
