"""The frozen snapshot: memory rendered once at session start into a system-prompt block.

``take_snapshot(store)`` reads both stores once and renders::

    <env_memory>
    MEMORY (your personal notes) [12% — 264/2,200 chars]
    first entry
    §
    second entry
    </env_memory>

    <user_profile>
    USER PROFILE (who the user is) [3% — 41/1,375 chars]
    …
    </user_profile>

Invariants:
- the returned ``FrozenSnapshot`` is immutable: its ``text`` is byte-identical for the whole
  session whatever is written mid-session (prompt caches stay warm); writes reach the backend
  at once and show in the next session's snapshot;
- rendering is a pure function of the stored entries (no clock, no randomness);
- an entry the scanner objects to renders as ``[BLOCKED: reason]`` — it never reaches the
  prompt, but stays in the live state where the user can see and remove it;
- an over-large store (edited outside refold) is cut to twice its limit with a marker.
"""

from __future__ import annotations

from collections.abc import Sequence

from refold._records import dataclass
from refold.memory.actions import Entry, MemoryStore
from refold.memory.entries import ENTRY_DELIMITER, HEADERS, TARGETS, Usage

TAGS = {"memory": "env_memory", "user": "user_profile"}


@dataclass(frozen=True)
class FrozenSnapshot:
    """The memory block for one session's system prompt ("" when both stores are empty)."""

    text: str
    usage: tuple[Usage, ...]
    blocked: int  # entries replaced by a [BLOCKED: …] placeholder
    # (target, entry texts) shown in ``text`` (not blocked): what ``MemoryStore.mark_used``
    # stamps once a turn has used this snapshot
    shown: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.text)


def _snapshot_text(entry: Entry) -> str:
    return entry.text if entry.blocked is None else f"[BLOCKED: {entry.blocked}]"


def render_section(target: str, entries: Sequence[Entry], usage: Usage) -> str:
    """One tagged section, or "" when the store is empty."""
    if not entries:
        return ""
    body = ENTRY_DELIMITER.join(_snapshot_text(e) for e in entries)
    cap = max(usage.limit * 2, 1000)
    if len(body) > cap:
        head, tail = int(cap * 0.7), int(cap * 0.2)
        body = (f"{body[:head]}\n[… {len(body) - head - tail:,} characters cut: memory is over "
                f"its limit; consolidate with the memory tool …]\n{body[-tail:]}")
    tag = TAGS[target]
    return f"<{tag}>\n{HEADERS[target]} [{usage.describe()}]\n{body}\n</{tag}>"


def take_snapshot(store: MemoryStore) -> FrozenSnapshot:
    """Read both stores once and freeze the system-prompt block."""
    sections: list[str] = []
    usages: list[Usage] = []
    shown: list[tuple[str, tuple[str, ...]]] = []
    blocked = 0
    for target in TARGETS:
        view = store.read(target)
        usages.append(view.usage)
        blocked += sum(e.blocked is not None for e in view.entries)
        section = render_section(target, view.entries, view.usage)
        if section:
            sections.append(section)
            shown.append((target, tuple(e.text for e in view.entries if e.blocked is None)))
    return FrozenSnapshot(text="\n\n".join(sections), usage=tuple(usages), blocked=blocked,
                          shown=tuple(shown))
