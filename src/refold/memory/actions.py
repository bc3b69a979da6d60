"""``MemoryStore``: the live memory state and its actions, the same over every backend.

Actions: ``add``, ``replace`` and ``remove`` (by a unique substring or ``#id``), ``apply`` (a
batch, all-or-nothing), ``read`` (live state with usage) and ``stats``. Invariants:
- every write scans its new content first (``refold.memory.scan``) and is refused with the
  reason when it matches; nothing is written then;
- every write reloads from the backend inside the backend's transaction (a file lock), so a
  write from another process is never lost; compare-and-swap conflicts are retried;
- a write's ``guard`` (``apply(..., guard=…)``) sees the entries that reload read, so a check
  that depends on what is stored (the reviewer's near-duplicate check) holds for the state the
  write applies to, not for one another process has since changed;
- replace/remove (and batches) are refused with ``Conflict`` when the backing text drifted
  (edited outside refold), after a backup copy is made; ``add`` still works;
- an exact duplicate add succeeds and keeps one copy; errors carry what a model needs to act
  (usage, current entries, the candidates of an ambiguous match).
Entries read back carry ``blocked``: the scan reason when the stored text matches the scanner.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from refold._records import dataclass, field, replace
from refold.errors import Conflict, MemoryError_, RefoldError
from refold.memory.backend import Loaded, MemoryBackend
from refold.memory.entries import DEFAULT_LIMITS, TARGETS, Usage, check_target, usage_of
from refold.memory.ops import MemoryOp, apply_ops, entry_id, make_op
from refold.memory.scan import scan_entry

log = logging.getLogger(__name__)

# ``guard(ops, texts)``: called with a write's ops and the entry texts it is about to apply to
# (read under the write's lock, again on each compare-and-swap retry); raising refuses the write
Guard = Callable[[Sequence[MemoryOp], Sequence[str]], None]

MAX_CAS_RETRIES = 50
DEFAULT_STALE_DAYS = 30.0


@dataclass(frozen=True)
class Entry:
    """One live entry: its text, id, metadata and — if the scanner objects — why."""

    id: str
    text: str
    created_at: float
    updated_at: float
    blocked: str | None = None
    last_used_at: float = 0.0  # see ``MemoryStore.mark_used`` (0: never used)

    def display(self) -> str:
        """The text safe to show a model: blocked entries are replaced by a placeholder."""
        if self.blocked is None:
            return self.text
        return f"[BLOCKED: {self.blocked}] (entry #{self.id}; remove it with old_text='#{self.id}')"


@dataclass(frozen=True)
class MemoryView:
    target: str
    location: str
    entries: list[Entry]
    usage: Usage
    drift: bool = False


@dataclass(frozen=True)
class WriteResult:
    """The outcome of a write (or of staging one)."""

    target: str
    message: str
    usage: Usage
    changed: bool = True
    duplicates: int = 0
    staged: bool = False
    pending_id: str | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"success": True, "target": self.target, "message": self.message,
                               "usage": self.usage.describe(), "entry_count": self.usage.entries}
        if self.staged:
            out.update(staged=True, pending_id=self.pending_id)
        if self.duplicates:
            out["duplicates"] = self.duplicates
        if self.notes:
            out["notes"] = list(self.notes)
        return out


def check_content(op: MemoryOp) -> None:
    """Refuse content the scanner objects to (MemoryError_ with the reason)."""
    if op.action in ("add", "replace"):
        reason = scan_entry(op.content)
        if reason:
            hint = ("memory enters every future system prompt; rewrite the note without "
                    "instructions to the model or secrets")
            if reason.startswith("credential:"):
                hint = ("keep the secret where it lives (an environment variable, a secrets "
                        "manager) and note only where to find it, e.g. 'the key is in "
                        "$OPENAI_API_KEY'")
            raise MemoryError_(f"refused: {reason}", hint=hint, reason=reason)


class MemoryStore:
    """Bounded MEMORY / USER stores over a ``MemoryBackend``."""

    def __init__(self, backend: MemoryBackend, *, limits: Mapping[str, int] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.backend = backend
        self.limits = {**DEFAULT_LIMITS, **(limits or {})}
        self.clock = clock

    def limit(self, target: str) -> int:
        return self.limits[check_target(target)]

    # -- reads ----------------------------------------------------------------------------
    def read(self, target: str) -> MemoryView:
        target = check_target(target)
        settled_load = getattr(self.backend, "settled_load", None)
        if settled_load is not None:  # (the file backend: see ``FileBackend.settled_load``)
            loaded = settled_load(target)
        else:
            with self.backend.transaction(target):  # a consistent file + sidecar pair
                loaded = self.backend.load(target)
        entries = [Entry(id=entry_id(r.text), text=r.text, created_at=r.created_at,
                         updated_at=r.updated_at, blocked=scan_entry(r.text),
                         last_used_at=r.last_used_at) for r in loaded.rows]
        usage = usage_of(target, [r.text for r in loaded.rows], self.limits[target])
        return MemoryView(target=target, location=self.backend.location(target),
                          entries=entries, usage=usage, drift=loaded.drift)

    def stats(self, *, stale_days: float = DEFAULT_STALE_DAYS) -> dict[str, dict[str, Any]]:
        """Per target: usage, blocked entries, drift, and what consolidation would fix
        (near-duplicate pairs, entries unused for ``stale_days``, the advice when it helps;
        ``refold.memory.consolidation``)."""
        from refold.memory.consolidation import consolidation_of

        out: dict[str, dict[str, Any]] = {}
        for target in TARGETS:
            view = self.read(target)
            out[target] = {"chars": view.usage.chars, "limit": view.usage.limit,
                           "percent": view.usage.percent,
                           "over_limit": view.usage.over_limit, "entries": view.usage.entries,
                           "blocked": sum(e.blocked is not None for e in view.entries),
                           "drift": view.drift, "location": view.location,
                           **consolidation_of(view, now=self.clock(),
                                              stale_days=stale_days).to_dict()}
        return out

    def mark_used(self, target: str, texts: Sequence[str], *, now: float | None = None) -> int:
        """Stamp ``last_used_at`` on the entries whose text is in ``texts`` (entries that were
        in a frozen snapshot a completed turn sent to the model). Text and ``updated_at`` stay
        as they are; a drifted store is left alone (its text is not refold's to rewrite).
        Returns how many entries were stamped."""
        target = check_target(target)
        wanted = set(texts)
        stamp = self.clock() if now is None else now
        for _attempt in range(MAX_CAS_RETRIES):
            with self.backend.transaction(target):
                loaded = self.backend.load(target)
                if loaded.drift or not wanted:
                    return 0
                rows = [replace(r, last_used_at=stamp) if r.text in wanted else r
                        for r in loaded.rows]
                hits = sum(r.text in wanted for r in loaded.rows)
                if not hits:
                    return 0
                try:
                    self.backend.save(target, rows, loaded)
                    return hits
                except Conflict as exc:
                    if not exc.details.get("retry"):
                        raise
        raise Conflict(f"memory {target} kept changing underneath; last-used times not stamped")

    # -- writes ---------------------------------------------------------------------------
    def add(self, target: str, content: str) -> WriteResult:
        return self.apply(target, [make_op("add", content=content)])

    def replace(self, target: str, old_text: str, content: str) -> WriteResult:
        return self.apply(target, [make_op("replace", old_text=old_text, content=content)])

    def remove(self, target: str, old_text: str) -> WriteResult:
        return self.apply(target, [make_op("remove", old_text=old_text)])

    def apply(self, target: str, ops: Sequence[MemoryOp], *,
              guard: Guard | None = None) -> WriteResult:
        """Apply ``ops`` to ``target`` all-or-nothing; returns the result or raises why not
        (``guard``'s error too: it is called with the entries read inside the transaction)."""
        target = check_target(target)
        for op in ops:
            check_content(op)
        only_adds = all(op.action == "add" for op in ops)
        for attempt in range(MAX_CAS_RETRIES):
            with self.backend.transaction(target):
                loaded = self.backend.load(target)
                if loaded.drift and not only_adds:
                    self._refuse_drift(target)
                if guard is not None:
                    guard(ops, [row.text for row in loaded.rows])
                if loaded.drift:
                    self.backend.backup(target)  # the add rewrites the file: keep the original
                try:
                    return self._commit(target, ops, loaded)
                except Conflict as exc:
                    if not exc.details.get("retry"):
                        raise
                    log.debug("memory %s moved underneath, retrying", target)
            time.sleep(random.uniform(0, 0.002 * (attempt + 1)))  # jitter: spread the racers
        raise Conflict(f"memory {target} kept changing underneath; write not applied",
                       hint="retry in a moment")

    def _commit(self, target: str, ops: Sequence[MemoryOp], loaded: Loaded) -> WriteResult:
        limit = self.limits[target]
        try:
            applied = apply_ops(loaded.rows, ops, limit, self.clock())
        except RefoldError as exc:
            exc.details.setdefault("usage", usage_of(target, [r.text for r in loaded.rows],
                                                     limit).fraction())
            exc.details["current_entries"] = self._display(loaded)
            raise
        if applied.changed:
            self.backend.save(target, applied.rows, loaded)
        usage = usage_of(target, [r.text for r in applied.rows], limit)
        return WriteResult(target=target, message=_message(ops, applied.changed),
                           usage=usage, changed=applied.changed, duplicates=applied.duplicates)

    def _display(self, loaded: Loaded) -> list[str]:
        return [Entry(id=entry_id(r.text), text=r.text, created_at=r.created_at,
                      updated_at=r.updated_at, blocked=scan_entry(r.text)).display()
                for r in loaded.rows]

    def _refuse_drift(self, target: str) -> None:
        backup = self.backend.backup(target)
        where = self.backend.location(target)
        raise Conflict(f"{where} was changed outside refold; replace/remove refused so the "
                       f"outside edit is not lost",
                       hint=f"a copy is at {backup}; check the file, then accept it with "
                            f"`refold memory adopt --target {target}` (adding entries still works)",
                       backup=backup)

    def adopt(self, target: str) -> MemoryView:
        """Accept the current backing text (after an outside edit) as refold's own."""
        target = check_target(target)
        with self.backend.transaction(target):
            self.backend.adopt(target)
        return self.read(target)


def _message(ops: Sequence[MemoryOp], changed: bool) -> str:
    if len(ops) > 1:
        return f"applied {len(ops)} operations" if changed else "nothing changed"
    if not changed:
        return "entry already exists (no duplicate added)"
    return {"add": "entry added", "replace": "entry replaced", "remove": "entry removed"}[
        ops[0].action]
