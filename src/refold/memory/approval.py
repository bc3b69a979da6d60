"""Write approval for model-initiated memory writes: allow, stage, or block.

The agent's memory tool and the background review write through a ``MemoryWriter``; a person
using the CLI writes to the ``MemoryStore`` directly (they are the approver).
- ``allow``: writes apply at once;
- ``stage``: the write is checked (content scan, non-empty) and queued as a ``PendingWrite``
  in the backend; ``approve(id)`` applies it (re-checked against the state at that time),
  ``reject(id)`` drops it. The queue survives restarts;
- ``block``: every write is refused with ``MemoryError_``.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeVar

from refold._records import dataclass
from refold.errors import Conflict, InvalidInput, MemoryError_, NotFound, RefoldError
from refold.memory.actions import (
    MAX_CAS_RETRIES,
    Guard,
    MemoryStore,
    WriteResult,
    check_content,
)
from refold.memory.entries import check_target, preview
from refold.memory.ops import MemoryOp, apply_ops

ApprovalMode = Literal["allow", "stage", "block"]
APPROVAL_MODES: tuple[str, ...] = ("allow", "stage", "block")
Item = dict[str, Any]
T = TypeVar("T")

log = logging.getLogger(__name__)


def check_mode(mode: str) -> ApprovalMode:
    if mode not in APPROVAL_MODES:
        raise InvalidInput(f"unknown memory approval mode {mode!r}",
                           hint="use allow, stage or block")
    return mode  # type: ignore[return-value]


@dataclass(frozen=True)
class PendingWrite:
    id: str
    target: str
    ops: tuple[MemoryOp, ...]
    origin: str
    created_at: float

    @property
    def summary(self) -> str:
        parts = []
        for op in self.ops:
            if op.action == "add":
                parts.append(f"add {preview(op.content, 60)!r}")
            elif op.action == "replace":
                parts.append(f"replace {preview(op.old_text, 30)!r} → {preview(op.content, 40)!r}")
            else:
                parts.append(f"remove {preview(op.old_text, 60)!r}")
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "target": self.target, "origin": self.origin,
                "created_at": self.created_at, "ops": [op.to_dict() for op in self.ops]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PendingWrite:
        """The queued item ``data``; ``InvalidInput`` saying what is wrong when it is not one
        (the queue is a file a person may edit)."""
        pending_id, target, ops = data.get("id"), data.get("target"), data.get("ops") or []
        if isinstance(pending_id, bool) or not isinstance(pending_id, str | int) \
                or pending_id == "":
            raise InvalidInput("it has no id")
        if not isinstance(target, str):
            raise InvalidInput("it has no target")
        if not isinstance(ops, list):
            raise InvalidInput("its ops are not a list")
        try:
            created_at = float(data.get("created_at", math.nan))
        except (TypeError, ValueError):
            created_at = math.nan
        if not math.isfinite(created_at):
            raise InvalidInput(f"its created_at {data.get('created_at')!r} is not a time")
        return cls(id=str(pending_id), target=check_target(target),
                   ops=tuple(MemoryOp.from_dict(op) for op in ops),
                   origin=str(data.get("origin") or ""), created_at=created_at)


class MemoryWriter:
    """Applies the approval policy in front of a ``MemoryStore``."""

    def __init__(self, store: MemoryStore, mode: str = "allow") -> None:
        self.store = store
        self.mode = check_mode(mode)

    def submit(self, target: str, ops: Sequence[MemoryOp], *, origin: str = "tool",
               guard: Guard | None = None) -> WriteResult:
        """Apply or stage ``ops``. ``guard(ops, texts)`` (see ``MemoryStore.apply``) is called
        under the lock the write or the staging holds, with the live entries and, staging,
        the contents already staged for ``target`` too: what another process wrote or staged
        a moment ago is in what it checks."""
        target = check_target(target)
        if self.mode == "block":
            raise MemoryError_("memory writes are turned off (approval mode: block)",
                               hint="leave memory unchanged; the user can change "
                                    "memory_approval to allow or stage")
        if self.mode == "allow":
            return self.store.apply(target, ops, guard=guard)
        for op in ops:
            check_content(op)
        pending = PendingWrite(id=uuid.uuid4().hex[:8], target=target, ops=tuple(ops),
                               origin=origin, created_at=time.time())

        def stage(items: list[Item]) -> tuple[list[Item], None]:
            rows = self.store.backend.load(target).rows
            if guard is not None:
                staged = [str(op.get("content") or "") for item in items
                          if item.get("target") == target
                          for op in (item.get("ops") or []) if isinstance(op, dict)]
                guard(ops, [row.text for row in rows] + [t for t in staged if t])
            # a write that could not apply now (no entry matches, over the limit) is refused
            # with why, as in allow mode: told "staged", the model took it for done
            apply_ops(rows, ops, self.store.limits[target], time.time())
            return [*items, pending.to_dict()], None

        self._update_pending(stage)
        usage = self.store.read(target).usage
        return WriteResult(target=target, usage=usage, changed=False, staged=True,
                           pending_id=pending.id,
                           message="staged for the user's approval; it is not saved yet")

    # -- the queue --------------------------------------------------------------------------
    def pending(self) -> list[PendingWrite]:
        """The queue, without the items that are not well-formed: each of those is left in
        place and warned about (as an unreadable sidecar is), not allowed to hide the rest."""
        found = []
        for item in self.store.backend.load_pending():
            try:
                found.append(PendingWrite.from_dict(item))
            except InvalidInput as exc:
                log.warning("skipping malformed pending memory write %r: %s (fix it in the "
                            "queue, or drop it with `refold memory reject ID`)",
                            item.get("id"), exc.message)
        return found

    def _update_pending(self, change: Callable[[list[Item]], tuple[list[Item], T]]) -> T:
        """Read-modify-write the queue, retrying when a compare-and-swap backend says so."""
        backend = self.store.backend
        for _attempt in range(MAX_CAS_RETRIES):
            with backend.pending_transaction():
                items, value = change(backend.load_pending())
                try:
                    backend.save_pending(items)
                    return value
                except Conflict as exc:
                    if not exc.details.get("retry"):
                        raise
        raise Conflict("the pending memory queue kept changing; try again")

    def _take(self, pending_id: str) -> tuple[int, Item]:
        """Remove the one queued item whose id starts with ``pending_id``: where it was, and it."""
        def change(items: list[Item]) -> tuple[list[Item], tuple[int, Item]]:
            found = [(index, item) for index, item in enumerate(items)
                     if str(item.get("id", "")).startswith(pending_id)]
            if not pending_id or not found:
                raise NotFound(f"no pending memory write {pending_id!r}",
                               hint="list them with `refold memory pending`")
            if len(found) > 1:
                raise InvalidInput(f"pending id {pending_id!r} is ambiguous",
                                   hint="give more characters of the id")
            index = found[0][0]
            return [*items[:index], *items[index + 1:]], found[0]
        return self._update_pending(change)

    def approve(self, pending_id: str) -> WriteResult:
        """Apply a staged write. If it is malformed or no longer applies, it goes back where it
        was in the queue and the error says why, with its id in ``details["pending_id"]``."""
        index, item = self._take(pending_id)
        try:
            write = PendingWrite.from_dict(item)
        except InvalidInput as exc:
            self._put_back(index, item)
            raise InvalidInput(f"pending memory write {item.get('id')!r} is malformed: "
                               f"{exc.message}",
                               hint="fix it in the queue, or drop it with `refold memory "
                                    "reject ID`", pending_id=str(item.get("id"))) from None
        try:
            return self.store.apply(write.target, write.ops)
        except Exception as exc:
            self._put_back(index, item)
            if isinstance(exc, RefoldError):
                exc.details["pending_id"] = write.id
            raise

    def _put_back(self, index: int, item: Item) -> None:
        self._update_pending(lambda items: ([*items[:index], item, *items[index:]], None))

    def reject(self, pending_id: str) -> PendingWrite:
        """Drop a staged write; a malformed one too (it could never be approved)."""
        _index, item = self._take(pending_id)
        try:
            return PendingWrite.from_dict(item)
        except InvalidInput:
            return PendingWrite(id=str(item.get("id")), target=str(item.get("target")), ops=(),
                                origin=str(item.get("origin") or ""), created_at=0.0)
