"""Where to cut: the protected head, the token-budgeted tail, and the summary's role.

All cuts fall on unit boundaries (``structure.split_units``), so no tool call is ever separated
from its results. The tail is chosen walking back from the end:

1. at least ``tail_min_messages`` messages, whatever they cost;
2. then whole units while the tail stays within its token budget;
3. then up to ``tail_floor_messages`` messages while it stays under the soft ceiling (1.5x);
4. finally extended back to include the last real user message and the last assistant message,
   which always survive verbatim.

The summary goes between head and tail in a role that keeps turns alternating; when neither
role fits (e.g. head ends with an assistant turn and the tail starts with a user turn) the tail
start moves by one unit, and only if that is impossible is the summary merged into the first
tail message.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from refold.compaction.structure import SYSTEM_ROLES, Unit
from refold.compaction.summary import is_summary_message
from refold.messages.model import Message, is_tool_images


def system_prefix_end(messages: Sequence[Message]) -> int:
    i = 0
    while i < len(messages) and messages[i].get("role") in SYSTEM_ROLES:
        i += 1
    return i


def align_to_units(index: int, units: Sequence[Unit]) -> int:
    """The smallest unit boundary ≥ ``index``."""
    for unit in units:
        if unit.start >= index:
            return unit.start
        if unit.start < index < unit.end:
            return unit.end
    return units[-1].end if units else index


def unit_containing(index: int, units: Sequence[Unit]) -> Unit:
    for unit in units:
        if unit.start <= index < unit.end:
            return unit
    raise IndexError(index)


def required_indices(messages: Sequence[Message]) -> list[int]:
    """The last real user message and the last assistant message (kept verbatim)."""
    out: list[int] = []
    last_user = next((i for i in range(len(messages) - 1, -1, -1)
                      if messages[i].get("role") == "user"
                      and not is_summary_message(messages[i])
                      and not is_tool_images(messages[i])), None)
    last_assistant = next((i for i in range(len(messages) - 1, -1, -1)
                           if messages[i].get("role") == "assistant"
                           and not is_summary_message(messages[i])), None)
    for idx in (last_user, last_assistant):
        if idx is not None:
            out.append(idx)
    return out


def select_tail(messages: Sequence[Message], units: Sequence[Unit], head_end: int, *,
                budget: int, soft_ceiling: float, min_messages: int, floor_messages: int,
                count: Callable[[Message], int], stretch: bool = True,
                spare: Sequence[int] = ()) -> int:
    """The index where the verbatim tail starts (a unit boundary ≥ ``head_end``), reaching
    back to the last real user and assistant messages unless ``stretch`` is False; not to
    the ones in ``spare`` (kept ahead of the summary, or summarized: the core decides)."""
    candidates = [u for u in units if u.start >= head_end]
    tail_start = len(messages)
    kept = used = 0
    ceiling = budget * soft_ceiling
    for unit in reversed(candidates):
        cost = sum(count(messages[i]) for i in range(unit.start, unit.end))
        if kept >= min_messages:
            within_budget = used + cost <= budget
            within_floor = kept < floor_messages and used + cost <= ceiling
            if not (within_budget or within_floor):
                break
        tail_start, kept, used = unit.start, kept + len(unit), used + cost
    for idx in required_indices(messages) if stretch else ():
        if head_end <= idx < tail_start and idx not in spare:
            tail_start = unit_containing(idx, units).start
    return tail_start


def summary_role(last_head: str | None, first_tail: str | None) -> str | None:
    """The role a standalone summary can take between these two, or None if neither fits."""
    left = "system" if last_head is None or last_head in SYSTEM_ROLES else last_head
    right = first_tail or "end"
    if left == "system":
        return None if right == "user" else "user"
    if left == "user":
        return None if right == "assistant" else "assistant"
    if left == "tool":
        return "assistant" if right in ("user", "end") else "user"
    # left == assistant
    return "user" if right in ("assistant", "end") else None


def resolve_junction(messages: Sequence[Message], units: Sequence[Unit], head_end: int,
                     tail_start: int) -> tuple[int, str | None]:
    """Shift ``tail_start`` by up to one unit each way so a summary role fits.

    Returns ``(tail_start, role)``; role None means: merge into the first tail message.
    """
    def role_at(start: int) -> str | None:
        last = messages[head_end - 1].get("role") if head_end > 0 else None
        first = messages[start].get("role") if start < len(messages) else None
        return summary_role(last, first)

    role = role_at(tail_start)
    if role is not None:
        return tail_start, role
    starts = [u.start for u in units]
    pos = starts.index(tail_start) if tail_start in starts else None
    if pos is not None and pos > 0 and starts[pos - 1] > head_end:
        earlier = starts[pos - 1]
        if role_at(earlier) is not None:
            return earlier, role_at(earlier)
    required = required_indices(messages)
    if pos is not None and pos + 1 < len(starts):
        later = starts[pos + 1]
        if all(not (tail_start <= r < later) for r in required) and role_at(later) is not None:
            return later, role_at(later)
    return tail_start, None
