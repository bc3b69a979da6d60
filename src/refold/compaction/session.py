"""Compaction of a stored session: the projection as messages, checkpoints, leases, rotation.

The ledger is never rewritten. A compaction of a stored session appends a checkpoint whose
``details`` hold what the model view needs besides the active rows (the same layout the runtime
reads): ``head`` (messages kept verbatim before the summary), ``block`` (the summary message and
any acknowledgement), ``overrides`` (tail rows the prune downgraded, by seq; the ledger keeps the
originals), ``summarized`` and ``language``. With ``rotate`` the compacted view starts a child
session instead (link kind "compaction", title "#N"), and the parent is ended — Hermes' chain.
The child also gets a copy of the latest task-state events (``STATE_EVENT_KINDS``: the recorded
system prompt, the todo list), so it is whole on its own: a resumed child, ``refold context``
and anything else reading one session's events need not walk the lineage.

A per-session lease (``compact:<session id>``) makes sure two processes never plan the same
window at once (the loser gets ``Conflict``), and the checkpoint is a compare-and-set in the
store (``add_checkpoint(expect=…)``): it lands only over the view it was planned from, so a
runtime compacting without this lease cannot slip a second checkpoint over the same window.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from typing import Any

from refold._records import dataclass, field
from refold.compaction.core import CompactionReport, CompactionResult, compact
from refold.compaction.policy import CompactionPolicy, threshold_for
from refold.compaction.prune import point_cut_note
from refold.compaction.structure import tool_pair_order
from refold.compaction.summarizer import Summarizer
from refold.compaction.summary import SUMMARY_KEY
from refold.errors import Conflict
from refold.messages.model import Message, wire_form
from refold.store.base import (
    Checkpoint,
    CheckpointBase,
    CheckpointDraft,
    Projection,
    Session,
    Store,
    StoredMessage,
)
from refold.tokens.counter import TokenCounter
from refold.tokens.models import get_counter

# Event kinds whose latest payload is the session's current state (not a log): the runtime's
# recorded client system prompt, the ``todo`` tool's list (refold.tools.todo.EVENT_KIND;
# named here because tools sit above compaction) and its tools' size (refold.runtime.recorded).
STATE_EVENT_KINDS = ("system_prompt", "todo", "tools", "window")


def carry_state_events(store: Store, parent_id: str, child_id: str,
                       kinds: Sequence[str] = STATE_EVENT_KINDS,
                       until: float | None = None) -> int:
    """Append to ``child_id`` the latest event of each kind found along ``parent_id``'s
    lineage (the parent first, then its ancestors) — with ``until``, the latest recorded at or
    before that time; returns how many were carried."""
    lineage = [parent_id] + [s.id for s in store.ancestors(parent_id) if s.id != parent_id]
    carried = 0
    for kind in kinds:
        for sid in lineage:
            events = [e for e in store.list_events(sid, kind)
                      if until is None or e.created_at <= until]
            if events:
                store.append_event(child_id, kind, dict(events[-1].payload))
                carried += 1
                break
    return carried


def recorded_system_prompt(store: Store, session_id: str) -> str | None:
    """The latest system prompt recorded for the session (a ``system_prompt`` event), if any."""
    events = store.list_events(session_id, "system_prompt")
    text = events[-1].payload.get("text") if events else None
    return text if isinstance(text, str) and text else None


def fork_with_state(store: Store, session_id: str, at_seq: int | None = None, *,
                    kind: str = "fork", title: str | None = None) -> Session:
    """``store.fork_session`` plus the task state (``STATE_EVENT_KINDS``) as it was at the
    fork point: the events recorded up to the last copied message (all of them when the whole
    session is copied), so a branch resumes with its system prompt and todo list."""
    child = store.fork_session(session_id, at_seq, kind=kind, title=title)
    until = None
    if at_seq is not None:
        rows = store.get_messages(session_id, include_inactive=True, start_seq=at_seq,
                                  end_seq=at_seq)
        until = rows[0].created_at if rows else None
    carry_state_events(store, session_id, child.id, until=until)
    return child


def projection_messages(projection: Projection, system_prompt: str | None = None
                        ) -> list[Message]:
    """The model view: system prompt, checkpoint head + summary block, then the active tail."""
    out: list[Message] = []
    if system_prompt:
        out.append({"role": "system", "content": system_prompt})
    checkpoint = projection.checkpoint
    details = checkpoint.details if checkpoint else {}
    overrides = {int(seq): msg for seq, msg in (details.get("overrides") or {}).items()}
    if checkpoint is not None:
        out.extend(dict(m) for m in details.get("head") or [])
        block = details.get("block")
        if not block:
            block = [{"role": checkpoint.summary_role or "user", "content": checkpoint.summary,
                      SUMMARY_KEY: True}]
        out.extend(dict(m) for m in block)
    out.extend(dict(overrides.get(row.seq, row.message)) for row in projection.messages)
    return out


def _same_row(stored: Message, kept: Message) -> bool:
    return (stored.get("role") == kept.get("role")
            and stored.get("tool_call_id") == kept.get("tool_call_id"))


def _in_kept_order(rows: Sequence[StoredMessage]) -> list[StoredMessage] | None:
    """Tail ``rows`` in the order the compacted view keeps them: a tool result that arrived
    late (after other rows) next to its call, as ``repair_tool_pairs`` moves it. The ledger
    keeps its order (the runtime's provider repair moves the result the same way when the view
    is sent). None when the view adds or drops a message there (a stub, an orphan result)."""
    order, orphans = tool_pair_order([r.message for r in rows], keep_pending=True)
    if orphans or not all(isinstance(k, int) for k in order):
        return None
    return [rows[k] for k in order if isinstance(k, int)]


def point_cut_notes(projection: Projection, view: Sequence[Message], result: CompactionResult
                    ) -> CompactionResult:
    """The result with each cut note in the kept tail naming the ledger row that holds the
    whole message ("… in the session ledger at seq 41 of session S …]"), so the model (or a
    person) can fetch it — also from a rotated child, whose own rows are the cut copies."""
    report, compacted = result.report, result.messages
    offset = len(view) - len(projection.messages)
    start = max(report.tail_start, offset)
    rows = _in_kept_order(projection.messages[start - offset:])
    if not rows or len(rows) > len(compacted):
        return result
    first = len(compacted) - len(rows)
    kept = compacted[first:]
    if not all(_same_row(r.message, m) for r, m in zip(rows, kept, strict=True)):
        return result  # the tail does not line up with the rows: no pointer beats a wrong one
    pointed = [point_cut_note(m, f"seq {r.seq} of session {projection.session_id}")
               for r, m in zip(rows, kept, strict=True)]
    if all(p is m for p, m in zip(pointed, kept, strict=True)):
        return result
    return CompactionResult([*compacted[:first], *pointed], report)


def checkpoint_draft(projection: Projection, view: Sequence[Message], result: CompactionResult,
                     system_count: int) -> CheckpointDraft | None:
    """Map a compaction of ``projection_messages(projection)`` back onto ledger seqs.

    None when the result cannot be stored as a checkpoint (the cut fell inside the previous
    checkpoint, or the kept tail no longer lines up with the ledger rows). A tool result that
    arrived late is matched where the view keeps it, next to its call (``_in_kept_order``).
    """
    report, compacted = result.report, result.messages
    offset = len(view) - len(projection.messages)
    if report.summary is None or not (offset <= report.tail_start <= len(view)):
        return None
    rows = projection.messages
    tail_rows = _in_kept_order(rows[report.tail_start - offset:])
    if tail_rows is None:
        return None
    summarized = rows[:report.tail_start - offset]
    kept = compacted[len(compacted) - len(tail_rows):] if tail_rows else []
    if len(kept) != len(tail_rows) or not all(
            _same_row(r.message, m) for r, m in zip(tail_rows, kept, strict=True)):
        return None
    previous = projection.checkpoint
    tail_start_seq = tail_rows[0].seq if tail_rows else (rows[-1].seq + 1 if rows else 1)
    first_seq = previous.first_seq if previous else (summarized[0].seq if summarized else 0)
    last_seq = summarized[-1].seq if summarized else (previous.last_seq if previous else 0)
    if not 1 <= first_seq <= last_seq < tail_start_seq:
        return None
    head_end = min(report.head_end, len(compacted))
    block_end = len(compacted) - len(tail_rows)
    details: dict[str, Any] = {
        "head": [dict(m) for m in compacted[system_count:head_end]],
        "block": [dict(m) for m in compacted[head_end:block_end]],
        "summarized": report.summarized, "language": report.language}
    overrides = {str(r.seq): dict(m) for r, m in zip(tail_rows, kept, strict=True)
                 if wire_form(m) != wire_form(r.message)}
    if overrides:
        details["overrides"] = overrides
    if projection.window is not None:  # planned from a client's sliding window: its own
        details["window"] = projection.window
    return CheckpointDraft(
        summary=report.summary, first_seq=first_seq, last_seq=last_seq,
        tail_start_seq=tail_start_seq, anchors=list(report.anchors),
        tokens_before=report.tokens_before, tokens_after=report.tokens_after,
        summarizer=report.summarizer, status="ok" if report.status == "ok" else "fallback",
        summary_role=report.summary_role or "user", details=details)


@dataclass(frozen=True)
class SessionCompaction:
    """What ``compact_session`` did: the report, and the checkpoint or child session made."""

    report: CompactionReport
    session: Session  # the session now holding the compacted view (the child when rotated)
    checkpoint: Checkpoint | None = None
    rotated_from: str | None = None
    stored: bool = False
    note: str | None = None
    messages: list[Message] = field(default_factory=list)


def default_holder() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def compact_session(store: Store, session_id: str, *, context_length: int,
                    model: str | None = None, policy: CompactionPolicy | None = None,
                    counter: TokenCounter | None = None, summarizer: Summarizer | None = None,
                    system_prompt: str | None = None,
                    tools: Sequence[dict[str, Any]] | None = None, holder: str | None = None,
                    rotate: bool | None = None,
                    target_tokens: int | None = None) -> SessionCompaction:
    """Compact a stored session under its lease; append a checkpoint (or rotate to a child)."""
    policy = policy or CompactionPolicy()
    session = store.get_session(session_id)
    model = model or session.model
    holder = holder or default_holder()
    lease = f"compact:{session.id}"
    if not store.acquire_lease(lease, holder, policy.lease_seconds):
        raise Conflict(f"session {session.id} is being compacted by another process",
                       hint="retry in a moment")
    try:
        projection = store.projection(session.id)
        view = projection_messages(projection, system_prompt)
        result = compact(view, context_length=context_length, policy=policy,
                         counter=counter or get_counter(model), summarizer=summarizer,
                         model=model, tools=tools, target_tokens=target_tokens,
                         compaction_count=1 if projection.checkpoint else 0)
        system_count = 1 if system_prompt else 0
        result = point_cut_notes(projection, view, result)
        if not result.report.changed or result.report.summary is None:
            return SessionCompaction(result.report, session, note=result.report.reason,
                                     messages=result.messages)
        if rotate if rotate is not None else policy.rotate_on_compaction:
            return _rotate(store, session, result, system_count)
        draft = checkpoint_draft(projection, view, result, system_count)
        if draft is None:
            return SessionCompaction(result.report, session, messages=result.messages,
                                     note="the new cut does not map onto the ledger")
        try:
            checkpoint = store.add_checkpoint(session.id, draft,
                                              expect=CheckpointBase.of(projection))
        except Conflict as exc:  # another compactor committed over this view meanwhile
            return SessionCompaction(result.report, session, messages=result.messages,
                                     note=exc.message)
        return SessionCompaction(result.report, session, checkpoint=checkpoint, stored=True,
                                 messages=result.messages)
    finally:
        store.release_lease(lease, holder)


def _rotate(store: Store, parent: Session, result: CompactionResult, system_count: int
            ) -> SessionCompaction:
    """Start a child session holding the compacted view; end the parent (its rows stay)."""
    title = store.next_lineage_title(parent.title) if parent.title else None
    child = store.create_session(title=title, source=parent.source, model=parent.model,
                                 parent_session_id=parent.id, link_kind="compaction",
                                 owner=parent.owner)
    carried = [wire_form(m) for m in result.messages[system_count:]]
    store.append_messages(child.id, carried)
    carry_state_events(store, parent.id, child.id)
    store.end_session(parent.id, "compaction")
    return SessionCompaction(result.report, store.get_session(child.id), rotated_from=parent.id,
                             stored=True, messages=result.messages)


# -- what fills the window ---------------------------------------------------------------------
@dataclass(frozen=True)
class ContextBreakdown:
    """Tokens by part of the window for one session's model view."""

    session_id: str
    parts: dict[str, int]  # system, memory, summary, head, tail:<role>…, tool_outputs, tools
    total: int
    threshold: int
    context_length: int
    messages: int  # messages in the view
    checkpoint_id: int | None

    @property
    def percent_of_window(self) -> float:
        return round(100.0 * self.total / self.context_length, 1) if self.context_length else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "parts": dict(self.parts), "total": self.total,
                "threshold": self.threshold, "context_length": self.context_length,
                "percent_of_window": self.percent_of_window, "messages": self.messages,
                "checkpoint_id": self.checkpoint_id}


def context_breakdown(projection: Projection, *, context_length: int, model: str | None = None,
                      counter: TokenCounter | None = None, system_prompt: str | None = None,
                      memory: str | None = None, tools: Sequence[dict[str, Any]] | None = None,
                      policy: CompactionPolicy | None = None,
                      tools_tokens: int | None = None) -> ContextBreakdown:
    """Count what fills the window: system, memory, summary, kept head, tail by role, tools
    (``tools_tokens`` without ``tools``: their size as the session recorded it)."""
    counter = counter or get_counter(model)
    parts: dict[str, int] = {"system": 0, "memory": 0, "summary": 0, "head": 0}
    if system_prompt:
        parts["system"] = counter.count_message({"role": "system", "content": system_prompt})
    if memory:
        parts["memory"] = counter.count_text(memory)
    view = projection_messages(projection, None)
    lead = len(view) - len(projection.messages)
    for msg in view[:lead]:
        key = "summary" if msg.get(SUMMARY_KEY) else "head"
        parts[key] += counter.count_message(msg)
    tool_outputs = 0
    for msg in view[lead:]:
        role = str(msg.get("role"))
        n = counter.count_message(msg)
        parts[f"tail:{role}"] = parts.get(f"tail:{role}", 0) + n
        if role == "tool":
            tool_outputs += n
    parts["tool_outputs"] = tool_outputs
    parts["tools"] = counter.count_tools(tools) if tools else max(0, tools_tokens or 0)
    total = sum(v for k, v in parts.items() if k != "tool_outputs")
    threshold = threshold_for(policy or CompactionPolicy(), context_length, model).tokens
    return ContextBreakdown(projection.session_id, parts, total, threshold, context_length,
                            len(view) + (1 if system_prompt else 0),
                            projection.checkpoint.id if projection.checkpoint else None)
