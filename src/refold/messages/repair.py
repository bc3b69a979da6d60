"""Repair a transcript so every provider accepts it, and say exactly what changed.

``repair(messages)`` is pure and deterministic: the same input gives the same output and the
same list of changes; the input list and its dicts are never mutated. Applied in this order:

1. **Tool results are placed right after their call**, in the order of the assistant's
   ``tool_calls``. A result that appears anywhere else is moved there ("moved").
2. **Orphan results** (a ``tool_call_id`` no assistant message declares) are removed.
3. **Duplicate results** for one call are collapsed: the first one (in input order) is kept.
   When several assistant messages reuse one call id, results are matched to them first-in,
   first-out.
4. **Unanswered calls** get a synthetic result ``{"role": "tool", "tool_call_id": id,
   "content": MISSING_RESULT}`` inserted after the call. Inserting (rather than dropping the
   call) keeps the record that the model asked for the tool, and never edits what it said.
5. An empty ``tool_calls: []`` list is removed (OpenAI rejects it).
6. With ``strict_alternation=True`` (Anthropic-style providers), consecutive user messages and
   consecutive assistant messages are merged into one; string contents are joined with a
   blank line, part lists concatenated. Tool messages count as the user side of a turn, so a
   tool result followed by a user message is left alone (the Anthropic converter puts both in
   one user turn). Without the flag nothing is merged: OpenAI accepts repeated roles.

Invariant after ``repair``: every tool call is followed by exactly its results, in call order;
no tool message lacks its call; ``repair(repair(x).messages).changes == []``.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Sequence
from typing import Any, Literal

from refold._records import dataclass, field
from refold.messages.model import Message

MISSING_RESULT = "[no result recorded]"

ChangeKind = Literal["moved", "orphan_removed", "duplicate_removed", "missing_inserted",
                     "empty_tool_calls_removed", "merged"]


@dataclass(frozen=True)
class RepairChange:
    """One edit: ``index`` is the position in the *input* list of the message concerned."""

    kind: ChangeKind
    index: int
    detail: str

    def __str__(self) -> str:
        return f"message {self.index}: {self.detail}"


@dataclass(frozen=True)
class RepairResult:
    messages: list[Message]
    changes: list[RepairChange] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.changes)


def _results_by_id(messages: Sequence[Message]) -> dict[str, deque[int]]:
    by_id: dict[str, deque[int]] = defaultdict(deque)
    for i, message in enumerate(messages):
        if message.get("role") == "tool":
            by_id[str(message.get("tool_call_id") or "")].append(i)
    return by_id


def _place_tool_results(messages: Sequence[Message],
                        changes: list[RepairChange]) -> list[tuple[int | None, Message]]:
    """Steps 1–4: the output as (input index or None for synthetic, message) pairs."""
    pending = _results_by_id(messages)
    used: set[int] = set()
    out: list[tuple[int | None, Message]] = []
    for i, message in enumerate(messages):
        if message.get("role") == "tool":
            continue
        out.append((i, message))
        for call in message.get("tool_calls") or []:
            call_id = str(call.get("id") or "")
            if pending.get(call_id):
                j = pending[call_id].popleft()
                used.add(j)
                out.append((j, messages[j]))
            else:
                out.append((None, {"role": "tool", "tool_call_id": call_id,
                                   "content": MISSING_RESULT}))
                changes.append(RepairChange("missing_inserted", i,
                                            f"tool call {call_id!r} had no result; inserted "
                                            f"{MISSING_RESULT!r}"))
    declared = {str(c.get("id") or "") for m in messages for c in m.get("tool_calls") or []}
    for j, message in enumerate(messages):
        if message.get("role") == "tool" and j not in used:
            call_id = str(message.get("tool_call_id") or "")
            kind: ChangeKind = "duplicate_removed" if call_id in declared else "orphan_removed"
            what = "duplicate result" if call_id in declared else "result without a call"
            changes.append(RepairChange(kind, j, f"removed {what} for {call_id!r}"))
    _note_moves(out, changes)
    return out


def _note_moves(out: list[tuple[int | None, Message]], changes: list[RepairChange]) -> None:
    """Report each kept tool result whose rank among kept messages changed."""
    roles = {i: m.get("role") for i, m in out if i is not None}
    kept = [i for i, _ in out if i is not None]
    for position, (actual, expected) in enumerate(zip(kept, sorted(kept), strict=True)):
        if actual != expected and roles[actual] == "tool":
            changes.append(RepairChange("moved", actual,
                                        "moved tool result to follow its call "
                                        f"(now kept message {position})"))


def _drop_empty_tool_calls(out: list[tuple[int | None, Message]],
                           changes: list[RepairChange]) -> None:
    for k, (i, message) in enumerate(out):
        if "tool_calls" in message and not message["tool_calls"]:
            copy = {key: v for key, v in message.items() if key != "tool_calls"}
            out[k] = (i, copy)
            changes.append(RepairChange("empty_tool_calls_removed", i or 0,
                                        "removed an empty tool_calls list"))


def _as_parts(content: Any) -> list[Any]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return list(content)


def merge_contents(first: Any, second: Any) -> Any:
    """Join two contents: strings with a blank line, otherwise as one part list."""
    if first is None or first == "":
        return second
    if second is None or second == "":
        return first
    if isinstance(first, str) and isinstance(second, str):
        return first + "\n\n" + second
    return _as_parts(first) + _as_parts(second)


def _merge_pair(first: Message, second: Message) -> Message:
    merged = dict(first)
    merged["content"] = merge_contents(first.get("content"), second.get("content"))
    calls = list(first.get("tool_calls") or []) + list(second.get("tool_calls") or [])
    if calls:
        merged["tool_calls"] = calls
    for key in ("reasoning", "reasoning_content"):
        if second.get(key):
            merged[key] = merge_contents(first.get(key), second[key])
    return merged


def _merge_runs(out: list[tuple[int | None, Message]],
                changes: list[RepairChange]) -> list[tuple[int | None, Message]]:
    merged: list[tuple[int | None, Message]] = []
    for i, message in out:
        role = message.get("role")
        if merged and role in ("user", "assistant") and merged[-1][1].get("role") == role \
                and not merged[-1][1].get("tool_calls"):
            prev_i, prev = merged[-1]
            merged[-1] = (prev_i, _merge_pair(prev, message))
            changes.append(RepairChange("merged", i or 0,
                                        f"merged into the preceding {role} message"))
        else:
            merged.append((i, message))
    return merged


def repair(messages: Sequence[Message], *, strict_alternation: bool = False) -> RepairResult:
    """Return a provider-valid copy of ``messages`` and the changes made (see module doc)."""
    changes: list[RepairChange] = []
    out = _place_tool_results(messages, changes)
    _drop_empty_tool_calls(out, changes)
    if strict_alternation:
        out = _merge_runs(out, changes)
    changes.sort(key=lambda c: c.index)
    return RepairResult([m for _, m in out], changes)
