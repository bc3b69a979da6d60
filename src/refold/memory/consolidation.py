"""When memory needs consolidating, and what to consolidate: duplicates, stale entries, size.

``consolidation_of(view)`` is a pure reading of one store's live state (no writes):
- near-duplicate pairs (``refold.memory.similarity``): two entries saying the same thing;
- stale entries: last used (``Entry.last_used_at``: in a frozen snapshot that a completed turn
  sent to the model) more than ``stale_days`` ago — or never used and created that long ago;
- ``consolidate`` is true when the store is at ``NEAR_LIMIT_PERCENT`` of its limit or more
  (over it: new entries are already refused), or holds near-duplicates; ``advice`` says what to
  do in plain words.
"""

from __future__ import annotations

from typing import Any

from refold._records import dataclass, field
from refold.memory.actions import MemoryView
from refold.memory.entries import preview
from refold.memory.similarity import duplicate_pairs

NEAR_LIMIT_PERCENT = 80
DAY = 86_400.0


@dataclass(frozen=True)
class Consolidation:
    """What consolidating one store would fix."""

    duplicates: list[tuple[str, str]] = field(default_factory=list)  # entry id pairs
    stale: list[str] = field(default_factory=list)  # entry ids
    never_used: int = 0
    last_used_at: float = 0.0  # the most recent use of any entry (0: none yet)
    consolidate: bool = False
    advice: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"duplicates": [list(p) for p in self.duplicates], "stale": list(self.stale),
                "never_used": self.never_used, "last_used_at": self.last_used_at or None,
                "consolidate": self.consolidate, "advice": list(self.advice)}


def consolidation_of(view: MemoryView, *, now: float, stale_days: float) -> Consolidation:
    """Read ``view`` for duplicates, stale entries and closeness to the limit."""
    entries = view.entries
    pairs = [(entries[i].id, entries[j].id)
             for i, j in duplicate_pairs([e.text for e in entries])]
    cutoff = now - stale_days * DAY
    stale = [e.id for e in entries if (e.last_used_at or e.created_at) < cutoff]
    near_limit = view.usage.percent >= NEAR_LIMIT_PERCENT
    advice: list[str] = []
    flag = "" if view.target == "memory" else f" --target {view.target}"
    if pairs:
        shown = "; ".join(f"#{a} and #{b}" for a, b in pairs[:5])
        advice.append(f"{len(pairs)} near-duplicate pair(s) ({shown}): merge each pair with "
                      f"`refold memory replace{flag}` and remove the other entry")
    usage = view.usage
    if usage.over_limit:
        advice.append(f"{usage.percent}% of the {usage.limit:,}-character limit "
                      f"({usage.chars:,} characters): over the limit, so new entries are "
                      f"refused until it is under — shorten or merge entries with `refold memory "
                      f"replace{flag}`, or drop stale ones with `refold memory remove{flag}`")
    elif near_limit:
        advice.append(f"{usage.percent}% of the {usage.limit:,}-character limit: "
                      "shorten or merge entries before new ones are refused")
    if stale and (near_limit or pairs):
        names = ", ".join(f"#{i}" for i in stale[:5])
        advice.append(f"{len(stale)} entr{'y' if len(stale) == 1 else 'ies'} unused for "
                      f"{stale_days:g}+ days ({names}) are the first to drop")
    by_id = {e.id: e for e in entries}
    if pairs:
        first = by_id[pairs[0][0]].text, by_id[pairs[0][1]].text
        advice.append(f"e.g. {preview(first[0], 50)!r} ~ {preview(first[1], 50)!r}")
    return Consolidation(duplicates=pairs, stale=stale,
                         never_used=sum(not e.last_used_at for e in entries),
                         last_used_at=max((e.last_used_at for e in entries), default=0.0),
                         consolidate=bool(pairs) or near_limit, advice=advice)
