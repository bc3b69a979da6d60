"""The ``todo`` tool: the agent's task state — goal, plan and task list — kept as ledger
events and rebuilt on resume.

Every change appends one ``todo`` event holding the whole state after the change (a full
snapshot: ``todos``, ``goal``, ``plan``), so the state is the payload of the latest event (the
latest write wins) — along the session's lineage, so a compaction child or a branch starts from
its parent's state. Nothing is kept in process memory that the ledger does not have. A resumed
session shows the model its open task state once (``render_task_state``, placed by the
runtime on the first user turn after the resume).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from refold.errors import InvalidInput
from refold.store.base import Store
from refold.tools.registry import Tool, to_json

EVENT_KIND = "todo"
STATUSES = ("pending", "in_progress", "completed", "cancelled")
MAX_ITEMS = 50
MAX_CONTENT = 500
MAX_GOAL = 1000
MAX_PLAN = 4000

DESCRIPTION = (
    "Manage your task state for this session: the goal, the plan and the task list. Call with "
    "no arguments to read it. Pass `goal` or `plan` (text) to set them. Pass `todos` to write "
    "the list: with merge=false (default) it is replaced; with merge=true items are updated by "
    "id and new ids appended. Keep exactly one item in_progress while working. The state "
    "survives context compaction and session resume.")

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "todos": {
            "type": "array",
            "description": "Task items to write.",
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string", "description": "Stable item id, e.g. '1'."},
                    "content": {"type": "string", "description": "What to do."},
                    "status": {"type": "string", "enum": list(STATUSES)},
                },
                "required": ["id"],
            },
        },
        "merge": {"type": "boolean", "description": "Update by id instead of replacing."},
        "goal": {"type": "string", "description": "What this session is for (one or two lines)."},
        "plan": {"type": "string", "description": "How you intend to get there."},
    },
    "additionalProperties": False,
}


def load_task_state(store: Store, session_id: str) -> dict[str, Any]:
    """The current state (``todos``, ``goal``, ``plan``): the latest ``todo`` event of the
    session, else of its ancestors."""
    lineage = [session_id] + [s.id for s in store.ancestors(session_id) if s.id != session_id]
    for sid in lineage:
        events = store.list_events(sid, EVENT_KIND)
        if events:
            payload = events[-1].payload
            todos = payload.get("todos")
            return {"todos": [dict(i) for i in todos] if isinstance(todos, list) else [],
                    "goal": str(payload.get("goal") or ""), "plan": str(payload.get("plan") or "")}
    return {"todos": [], "goal": "", "plan": ""}


def load_todos(store: Store, session_id: str) -> list[dict[str, str]]:
    """The current list (see ``load_task_state``)."""
    todos: list[dict[str, str]] = load_task_state(store, session_id)["todos"]
    return todos


def render_task_state(state: dict[str, Any]) -> str:
    """The open task state as a block for the model ("" when nothing is open: no goal or
    plan and every item completed or cancelled)."""
    todos = state.get("todos") or []
    open_items = [t for t in todos if t.get("status") in ("pending", "in_progress")]
    if not (state.get("goal") or state.get("plan") or open_items):
        return ""
    parts = ["<task-state>", "Your task state from before this session was resumed "
             "(informational; keep it current with the todo tool):"]
    if state.get("goal"):
        parts.append(f"Goal: {state['goal']}")
    if state.get("plan"):
        parts.append(f"Plan:\n{state['plan']}")
    if todos:
        parts.append("Tasks:\n" + render_todos(todos))
    parts.append("</task-state>")
    return "\n".join(parts)


def _clean_item(raw: Any, index: int) -> dict[str, str]:
    if not isinstance(raw, dict):
        raise InvalidInput(f"todos[{index}] must be an object with id, content, status")
    item_id = str(raw.get("id") or "").strip()
    if not item_id:
        raise InvalidInput(f"todos[{index}] needs a non-empty 'id'")
    item: dict[str, str] = {"id": item_id[:40]}
    if "content" in raw:
        item["content"] = str(raw["content"]).strip()[:MAX_CONTENT]
    if "status" in raw:
        status = str(raw["status"])
        if status not in STATUSES:
            raise InvalidInput(f"todos[{index}].status must be one of {', '.join(STATUSES)}")
        item["status"] = status
    return item


def apply_todos(current: list[dict[str, str]], raw_items: Any,
                merge: bool) -> list[dict[str, str]]:
    """The list after writing ``raw_items`` onto ``current`` (pure)."""
    if not isinstance(raw_items, list):
        raise InvalidInput("'todos' must be a list of {id, content, status} objects")
    items = [_clean_item(raw, i) for i, raw in enumerate(raw_items)]
    if not merge:
        result = []
        for item in items:
            if not item.get("content"):
                raise InvalidInput(f"todo {item['id']!r} needs 'content' when replacing the list")
            result.append({"id": item["id"], "content": item["content"],
                           "status": item.get("status", "pending")})
    else:
        result = [dict(item) for item in current]
        index = {item["id"]: item for item in result}
        for item in items:
            if item["id"] in index:
                index[item["id"]].update(item)
            elif item.get("content"):
                new = {"id": item["id"], "content": item["content"],
                       "status": item.get("status", "pending")}
                result.append(new)
                index[new["id"]] = new
            else:
                raise InvalidInput(f"no todo with id {item['id']!r}; give 'content' to add it")
    if len(result) > MAX_ITEMS:
        raise InvalidInput(f"at most {MAX_ITEMS} todo items; finish or drop some first")
    return result


def _summary(todos: list[dict[str, str]]) -> dict[str, Any]:
    counts = {s: sum(1 for t in todos if t.get("status") == s) for s in STATUSES}
    return {"todos": todos, "summary": counts}


def todo_tool(store: Store, session_id: str | Callable[[], str]) -> Tool:
    """The ``todo`` tool bound to one session (an id, or a getter of the current id)."""

    def handler(args: dict[str, Any]) -> str:
        sid = session_id() if callable(session_id) else session_id
        state = load_task_state(store, sid)
        updated = dict(state)
        if args.get("todos") is not None:
            updated["todos"] = apply_todos(state["todos"], args["todos"],
                                           bool(args.get("merge", False)))
        for key, limit in (("goal", MAX_GOAL), ("plan", MAX_PLAN)):
            if args.get(key) is not None:
                if not isinstance(args[key], str):
                    raise InvalidInput(f"'{key}' must be text")
                updated[key] = args[key].strip()[:limit]
        if updated != state:  # a full snapshot: the latest event is the whole state
            # (an empty goal or plan is left out: a todo-only state keeps its old shape)
            store.append_event(sid, EVENT_KIND, {k: v for k, v in updated.items()
                                                 if k == "todos" or v})
        out = _summary(updated["todos"])
        out.update(goal=updated["goal"], plan=updated["plan"])
        return to_json(out)

    return Tool("todo", DESCRIPTION, PARAMETERS, handler)


def render_todos(todos: list[dict[str, str]]) -> str:
    """A short text block of the open items (for re-injection after compaction)."""
    marks = {"pending": "[ ]", "in_progress": "[>]", "completed": "[x]", "cancelled": "[-]"}
    lines = [f"{marks.get(t.get('status', ''), '[ ]')} {t['id']}. {t.get('content', '')}"
             for t in todos]
    return "\n".join(lines)
