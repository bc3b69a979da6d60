"""Memory operations as values, and the pure function that applies a batch of them.

``apply_ops(rows, ops, limit, now)`` never touches storage: it returns the new rows or raises an
error a model can act on. A batch is all-or-nothing because nothing is written unless the whole
list applies and the *final* state fits the limit (a batch may remove to make room for an add).

Matching for replace/remove: ``old_text`` is a substring of exactly one entry, or ``#<id>``
naming an entry by its id (the first 8 hex digits of its text's SHA-256), which is how a
blocked entry — whose text is never echoed to the model — can still be removed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, Literal

from refold._records import dataclass
from refold.errors import AmbiguousReference, InvalidInput, MemoryError_, NotFound
from refold.memory.entries import ENTRY_DELIMITER, char_count, preview
from refold.store.base import MemoryRow

Action = Literal["add", "replace", "remove"]
ACTIONS: tuple[str, ...] = ("add", "replace", "remove")


@dataclass(frozen=True)
class MemoryOp:
    action: Action
    content: str = ""
    old_text: str = ""

    def to_dict(self) -> dict[str, str]:
        out: dict[str, str] = {"action": self.action}
        if self.content:
            out["content"] = self.content
        if self.old_text:
            out["old_text"] = self.old_text
        return out

    @classmethod
    def from_dict(cls, data: Any) -> MemoryOp:
        if not isinstance(data, dict):
            raise InvalidInput("each operation must be an object with 'action'")
        return make_op(str(data.get("action") or ""), content=data.get("content"),
                       old_text=data.get("old_text"))


def entry_id(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]


def make_op(action: str, *, content: Any = None, old_text: Any = None) -> MemoryOp:
    """Build a validated op: known action, non-empty content / old_text where needed."""
    if action not in ACTIONS:
        raise InvalidInput(f"unknown memory action {action!r}", hint="use add, replace or remove")
    text = _clean(content)
    old = _clean(old_text)
    if action in ("add", "replace") and not text:
        hint = "use remove to delete an entry" if action == "replace" else "write the note to save"
        raise InvalidInput(f"{action}: content is empty", hint=hint)
    if ENTRY_DELIMITER.strip() == text or ENTRY_DELIMITER in f"\n{text}\n":
        raise InvalidInput(f"{action}: content has a line holding only '§' (the entry separator)",
                           hint="remove that line or write '§' inside a sentence")
    if action in ("replace", "remove") and not old:
        raise InvalidInput(f"{action}: old_text is empty",
                           hint="give a short substring of the entry (or its #id)")
    return MemoryOp(action=action, content=text, old_text=old)  # type: ignore[arg-type]


def _clean(value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidInput(f"expected text, got {type(value).__name__}")
    from refold.messages.validate import repair_text

    # lone surrogates (bytes that were not UTF-8, in argv or a JSON escape) become U+FFFD, as
    # in messages: they could not be written, and the write ended in a UnicodeEncodeError
    return repair_text(value.replace("\r\n", "\n").strip())


def find_entry(rows: Sequence[MemoryRow], old_text: str) -> int:
    """Index of the one entry ``old_text`` designates; NotFound / AmbiguousReference otherwise."""
    if old_text.startswith("#"):
        by_id = [i for i, row in enumerate(rows) if entry_id(row.text) == old_text[1:].lower()]
        if len(by_id) == 1:
            return by_id[0]
    matches = [i for i, row in enumerate(rows) if old_text in row.text]
    if not matches:
        raise NotFound(f"no entry matched {preview(old_text, 60)!r}",
                       hint="use a substring of one of the current entries")
    if len(matches) > 1:
        shown = [preview(rows[i].text) for i in matches]
        listed = "; ".join(repr(preview(rows[i].text, 50)) for i in matches[:5])
        raise AmbiguousReference(f"{len(matches)} entries matched {preview(old_text, 60)!r}: "
                                 f"{listed}",
                                 candidates=shown, hint="use a longer, unique substring")
    return matches[0]


@dataclass(frozen=True)
class Applied:
    rows: list[MemoryRow]
    changed: bool
    duplicates: int  # adds that were already present (success, one copy kept)


def apply_ops(rows: Sequence[MemoryRow], ops: Sequence[MemoryOp], limit: int,
              now: float) -> Applied:
    """Apply ``ops`` in order to a copy of ``rows``; the final state must fit ``limit``."""
    if not ops:
        raise InvalidInput("no operations given")
    work = list(rows)
    duplicates = 0
    for position, op in enumerate(ops, 1):
        try:
            duplicates += _apply_one(work, op, now)
        except (NotFound, InvalidInput) as exc:
            if len(ops) == 1:
                raise
            exc.message = f"operation {position} ({op.action}): {exc.message}"
            raise
    total = char_count(row.text for row in work)
    if total > limit and total > char_count(row.text for row in rows):
        raise MemoryError_(
            f"would exceed the limit: {total:,}/{limit:,} characters after this write "
            f"(now {char_count(r.text for r in rows):,}/{limit:,})",
            hint="consolidate: replace overlapping entries with shorter ones or remove stale "
                 "ones (a batch may remove and add in one call), then retry",
            usage=f"{char_count(r.text for r in rows):,}/{limit:,}", would_be=total, limit=limit)
    changed = [r.text for r in work] != [r.text for r in rows]
    return Applied(rows=work, changed=changed, duplicates=duplicates)


def _apply_one(work: list[MemoryRow], op: MemoryOp, now: float) -> int:
    if op.action == "add":
        if any(row.text == op.content for row in work):
            return 1
        work.append(MemoryRow(text=op.content, created_at=now, updated_at=now))
        return 0
    index = find_entry(work, op.old_text)
    if op.action == "remove":
        del work[index]
        return 0
    old = work[index]
    if any(row.text == op.content for i, row in enumerate(work) if i != index):
        del work[index]  # the new text already exists: replacing collapses the two
        return 1
    work[index] = MemoryRow(text=op.content, created_at=old.created_at, updated_at=now,
                            last_used_at=old.last_used_at)
    return 0
