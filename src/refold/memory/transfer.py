"""Copying memory between backends: file memory (MEMORY.md / USER.md) into DB memory and back.

``refold migrate`` moves a whole installation; memory that lives in files beside the database
must travel too, or switching ``memory_backend`` to ``db`` silently starts from nothing. The
copy never overwrites: a target that already holds the same entries is skipped, and a target
that holds *different* entries is left alone and reported as a conflict, so nothing the user
wrote on either side is lost. Entry metadata (created/updated times) travels with the text.
"""

from __future__ import annotations

from refold._records import dataclass, field
from refold.memory.backend import MemoryBackend
from refold.memory.entries import TARGETS


@dataclass
class MemoryTransfer:
    """Per target ("memory", "user"): what happened to it."""

    copied: dict[str, int] = field(default_factory=dict)  # target -> entries copied
    same: list[str] = field(default_factory=list)  # the target held exactly these entries
    conflicts: list[str] = field(default_factory=list)  # the target held other entries: kept

    @property
    def entries_copied(self) -> int:
        return sum(self.copied.values())


def copy_memory(source: MemoryBackend, target: MemoryBackend) -> MemoryTransfer:
    """Copy each non-empty target of ``source`` into ``target`` where that one is empty."""
    report = MemoryTransfer()
    for name in TARGETS:
        with source.transaction(name):
            rows = source.load(name).rows
        if not rows:
            continue
        with target.transaction(name):
            loaded = target.load(name)
            if [r.text for r in loaded.rows] == [r.text for r in rows]:
                report.same.append(name)
            elif loaded.rows:
                report.conflicts.append(name)
            else:
                target.save(name, rows, loaded)
                report.copied[name] = len(rows)
    return report
