"""Memory entries: the two targets, their limits, and the ``"\\n§\\n"`` text format.

A memory file is a list of entries joined by ``ENTRY_DELIMITER`` (a line holding only "§").
Invariants:
- ``parse_entries`` splits only on the full delimiter, so an entry that merely contains "§"
  stays one entry; a leading byte-order mark is dropped and CRLF line ends become LF,
  surrounding whitespace is stripped, empty entries dropped, and exact duplicates collapse to
  their first occurrence.
- ``render_entries(parse_entries(render_entries(xs))) == render_entries(xs)`` for any list of
  stripped, non-empty, distinct entries without the delimiter (multiline, CJK, emoji included).
- Usage is counted in characters (code points) of the entries joined by the delimiter —
  model-independent, and the same number the limit is checked against.
Metadata (created, updated) never appears in the rendered text; the backends keep it aside.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Literal

from refold._records import dataclass
from refold.errors import InvalidInput
from refold.store.base import MemoryRow

ENTRY_DELIMITER = "\n§\n"
Target = Literal["memory", "user"]
TARGETS: tuple[Target, ...] = ("memory", "user")
FILENAMES: dict[str, str] = {"memory": "MEMORY.md", "user": "USER.md"}
DEFAULT_LIMITS: dict[str, int] = {"memory": 2200, "user": 1375}
HEADERS: dict[str, str] = {
    "memory": "MEMORY (your personal notes)",
    "user": "USER PROFILE (who the user is)",
}


def check_target(target: str) -> Target:
    """Return ``target`` if it names a store, else raise InvalidInput."""
    if target == "memory":
        return "memory"
    if target == "user":
        return "user"
    raise InvalidInput(f"unknown memory target {target!r}", hint="use 'memory' or 'user'")


def parse_entries(raw: str) -> list[str]:
    """Split file text into entries: stripped, non-empty, exact duplicates collapsed."""
    # a file saved by a Windows editor keeps its entries (its first one not taken for hidden
    # text by the scan)
    raw = raw.removeprefix("\ufeff").replace("\r\n", "\n")
    if not raw.strip():
        return []
    parts = (part.strip() for part in raw.split(ENTRY_DELIMITER))
    return list(dict.fromkeys(part for part in parts if part))


def render_entries(entries: Sequence[str]) -> str:
    """The canonical file text for ``entries`` (a trailing newline when not empty)."""
    return ENTRY_DELIMITER.join(entries) + "\n" if entries else ""


def char_count(entries: Iterable[str]) -> int:
    """Characters the entries take once joined by the delimiter (what the limit counts)."""
    items = list(entries)
    return len(ENTRY_DELIMITER.join(items)) if items else 0


def dedupe_rows(rows: Iterable[MemoryRow]) -> list[MemoryRow]:
    """Drop rows whose text repeats an earlier row's (first occurrence wins)."""
    seen: set[str] = set()
    out: list[MemoryRow] = []
    for row in rows:
        if row.text not in seen:
            seen.add(row.text)
            out.append(row)
    return out


def new_row(text: str, now: float | None = None) -> MemoryRow:
    stamp = time.time() if now is None else now
    return MemoryRow(text=text, created_at=stamp, updated_at=stamp)


@dataclass(frozen=True)
class Usage:
    """How full one store is."""

    target: str
    chars: int
    limit: int
    entries: int

    @property
    def percent(self) -> int:
        """Whole percent of the limit used; above 100 when the store is over its limit (edited
        by hand, or the limit lowered): 3,347 of 2,200 characters is 152, not 100."""
        return (self.chars * 100) // self.limit if self.limit > 0 else 0

    @property
    def over_limit(self) -> bool:
        """More characters than the limit: while it is, a write that makes the store longer is
        refused (``apply_ops``); shortening or removing entries still works."""
        return self.chars > self.limit

    def fraction(self) -> str:
        return f"{self.chars:,}/{self.limit:,}"

    def describe(self) -> str:
        over = " OVER LIMIT" if self.over_limit else ""
        return f"{self.percent}% — {self.fraction()} chars{over}"


def usage_of(target: str, texts: Sequence[str], limit: int) -> Usage:
    return Usage(target=target, chars=char_count(texts), limit=limit, entries=len(texts))


def preview(text: str, width: int = 80) -> str:
    """A one-line preview of an entry for error messages (newlines shown as ⏎)."""
    flat = text.replace("\n", " ⏎ ")
    return flat if len(flat) <= width else flat[: width - 1] + "…"
