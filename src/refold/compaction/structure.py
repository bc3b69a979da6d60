"""The shape of a conversation: atomic units, tool-pair repair, and provider validity checks.

A *unit* is the smallest span compaction may cut around: an assistant message with tool calls
together with the tool results that answer it, or any other single message. A result that
arrived late (a few messages after its call) takes the messages in between into its call's unit.
Cutting only at unit boundaries is what keeps every tool call on the same side of a cut as its
result.

``repair_tool_pairs`` is the post-assembly safety net: every assistant tool call gets its result
right after it, in call order (a late result moved up, a stub if the result is gone), and tool
results without their call are dropped from the view (the ledger still has them).

``provider_problems`` checks the three families refold promises to stay valid for:
- ``openai``: tool pairs as above;
- ``anthropic``: system first, then after merging consecutive same-role turns (tool results are
  user-side ``tool_result`` blocks) strict user/assistant alternation starting with user;
- ``strict``: no merging at all; roles alternate user/assistant, tool results only right after
  the assistant turn that called them.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Sequence

from refold._records import dataclass
from refold.messages.model import Message, tool_call_ids
from refold.messages.repair import MISSING_RESULT

STUB_RESULT = "[result not kept in this context — see the context summary above]"
SYSTEM_ROLES = frozenset({"system", "developer"})


@dataclass(frozen=True)
class Unit:
    """A half-open span ``[start, end)`` of messages that must stay together."""

    start: int
    end: int

    def __len__(self) -> int:
        return self.end - self.start


def result_positions(messages: Sequence[Message]) -> dict[int, dict[str, int]]:
    """Where each call's result is: for each assistant message with tool calls (by index), its
    call ids mapped to the index of the result that answers them — the first result with that
    id after the call, right after it or a few messages later (late), and before another
    assistant message declares the same id again. A call without a result is left out."""
    found: dict[int, dict[str, int]] = {}
    waiting: dict[str, int] = {}  # call id → the assistant message whose result is due
    for i, msg in enumerate(messages):
        role = msg.get("role")
        if role == "assistant":
            for call_id in tool_call_ids(msg):
                waiting[call_id] = i
        elif role == "tool":
            tid = msg.get("tool_call_id")
            if isinstance(tid, str) and tid in waiting:
                found.setdefault(waiting.pop(tid), {})[tid] = i
    return found


def split_units(messages: Sequence[Message]) -> list[Unit]:
    """Group ``messages`` into units: a tool-calling assistant plus its contiguous results,
    reaching on to its last late result (and any late result of the calls in between)."""
    answers = result_positions(messages)
    units: list[Unit] = []
    i, n = 0, len(messages)
    while i < n:
        ids = set(tool_call_ids(messages[i])) if messages[i].get("role") == "assistant" else set()
        j = i + 1
        if ids:
            while j < n and messages[j].get("role") == "tool" \
                    and messages[j].get("tool_call_id") in ids:
                j += 1
        k = i
        while k < j:  # a late result: its call, the result and what lies between stay together
            j = max([j, *(r + 1 for r in answers.get(k, {}).values())])
            k += 1
        units.append(Unit(i, j))
        i = j
    return units


def tool_pair_order(messages: Sequence[Message], *, keep_pending: bool = False
                    ) -> tuple[list[int | str], int]:
    """``repair_tool_pairs``' output as positions: the index of each message kept, in order
    (each call's results right after it, in call order), or the call id where a stub goes; and
    how many orphan results were left out."""
    answers = result_positions(messages)
    placed = {r for found in answers.values() for r in found.values()}
    out: list[int | str] = []
    orphans = 0
    last_other = max((i for i, m in enumerate(messages) if m.get("role") != "tool"), default=-1)
    for i, msg in enumerate(messages):
        role = msg.get("role")
        if role == "tool":
            orphans += i not in placed  # placed ones go with their call
            continue
        out.append(i)
        ids = tool_call_ids(msg) if role == "assistant" else []
        found = answers.get(i, {})
        pending = keep_pending and i == last_other
        for tid in ids:
            if tid in found:
                out.append(found[tid])
            elif not pending:
                out.append(tid)
    return out, orphans


def repair_tool_pairs(messages: Sequence[Message], *, answered: Collection[str] | None = None,
                      keep_pending: bool = False) -> tuple[list[Message], int, int]:
    """Make every tool call answered right after it, in order; drop orphan results.

    A result that arrived late (after other messages) moves up to its call, as
    ``refold.messages.repair`` moves it. A call whose result the compaction left out gets
    ``STUB_RESULT``; with ``answered`` (the ids the transcript has a result for), a call that
    never had one gets ``MISSING_RESULT`` instead (saying it was left out would be untrue).
    ``keep_pending``: calls at the very end, still waiting for their results, stay as they are
    (the agent is running them; a stub there was untrue, and it made the compacted view longer
    than the ledger, so that no checkpoint of it could be stored). Returns ``(messages,
    stubs_added, orphans_dropped)``; input dicts are not mutated.
    """
    order, orphans = tool_pair_order(messages, keep_pending=keep_pending)
    out: list[Message] = []
    stubs = 0
    for at in order:
        if isinstance(at, int):
            out.append(messages[at])
            continue
        stubs += 1
        out.append({"role": "tool", "tool_call_id": at, "content":
                    STUB_RESULT if answered is None or at in answered else MISSING_RESULT})
    return out, stubs, orphans


def _openai_problems(messages: Sequence[Message]) -> list[str]:
    problems: list[str] = []
    pending: list[str] = []
    for idx, msg in enumerate(messages):
        role = msg.get("role")
        if role == "tool":
            if not pending or msg.get("tool_call_id") != pending[0]:
                problems.append(f"message {idx}: tool result {msg.get('tool_call_id')!r} "
                                "does not answer the next pending call")
            else:
                pending.pop(0)
            continue
        if pending:
            problems.append(f"message {idx}: calls {pending} unanswered before a {role} message")
            pending = []
        if role == "assistant":
            pending = list(tool_call_ids(msg))
    if pending:
        problems.append(f"end: calls {pending} unanswered")
    return problems


def _turn_roles(messages: Sequence[Message], merge: bool) -> list[str]:
    """Roles as a user/assistant turn sequence (system dropped; tool results are user-side)."""
    roles: list[str] = []
    for msg in messages:
        role = str(msg.get("role"))
        if role in SYSTEM_ROLES:
            continue
        side = "user" if role in ("user", "tool") else "assistant"
        if merge and roles and roles[-1] == side:
            continue
        roles.append("tool" if (not merge and role == "tool") else side)
    return roles


def _anthropic_problems(messages: Sequence[Message]) -> list[str]:
    problems: list[str] = []
    seen_other = False
    for idx, msg in enumerate(messages):
        if msg.get("role") in SYSTEM_ROLES:
            if seen_other:
                problems.append(f"message {idx}: system message after the conversation started")
        else:
            seen_other = True
    roles = _turn_roles(messages, merge=True)
    if roles and roles[0] != "user":
        problems.append("first turn is not a user turn")
    for a, b in itertools.pairwise(roles):
        if a == b:
            problems.append("turns do not alternate")
            break
    return problems


def _strict_problems(messages: Sequence[Message]) -> list[str]:
    problems = _anthropic_problems(messages)
    roles = _turn_roles(messages, merge=False)
    prev = None
    for role in roles:
        if role == prev and role != "tool":
            problems.append(f"two consecutive {role} messages")
            break
        if role == "tool" and prev not in ("assistant", "tool"):
            problems.append("tool result not right after an assistant turn")
            break
        prev = role
    return problems


def provider_problems(messages: Sequence[Message], provider: str = "openai") -> list[str]:
    """Why ``messages`` would be rejected by ``provider`` ("openai", "anthropic", "strict")."""
    problems = _openai_problems(messages)
    if provider == "anthropic":
        problems += _anthropic_problems(messages)
    elif provider == "strict":
        problems += _strict_problems(messages)
    return problems
