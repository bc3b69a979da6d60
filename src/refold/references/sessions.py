"""``@session:REF``: what another session established, within a budget, the rest spilled.

A referenced session contributes its latest checkpoint summary and its most recent messages
(newest kept first when the budget is tight, shown in order), under a "Referenced sessions"
block. Several references share one budget (20% of the window): each gets an equal share of
what is left, so a short session's unused share passes to the next. The session's whole
projection (summary + active tail, as the model of that session saw it) is written to the
spill store and the block names its id, so the model can page through the rest with
``session_search`` (``mode=spill``).

Tenancy: a reference resolves only among the requesting owner's sessions (``owner=``); a
session of another tenant is "unknown", exactly like one that does not exist.
"""

from __future__ import annotations

from collections.abc import Callable

from refold._records import dataclass
from refold.errors import AmbiguousReference, NotFound
from refold.messages.model import Message, content_text
from refold.references.budget import CountFn, cut_to, default_count
from refold.references.parse import Reference
from refold.references.spill import SpillStore
from refold.store.base import Projection, Session, Store

RECENT_MESSAGES = 12
MESSAGE_CHARS = 2000


@dataclass(frozen=True)
class SessionBlock:
    text: str
    warnings: list[str]


class SessionReferences:
    """Resolves ``@session`` references of one owner against ``store``."""

    def __init__(self, store: Store, *, owner: str = "", spill: SpillStore | None = None,
                 count: CountFn = default_count,
                 aliases: Callable[[str], str] | None = None) -> None:
        self.store = store
        self.owner = owner
        self.spill = spill
        self.count = count
        # the name a surface stores a session under for a name it was given (the proxy tags
        # a tenant's titles: "notes" is stored as "notes @1a2b3c4d")
        self.aliases = aliases

    def render(self, refs: list[Reference], budget: int, *,
               current_session_id: str | None = None) -> SessionBlock:
        """The "Referenced sessions" block for ``refs`` within ``budget`` tokens."""
        parts: list[str] = []
        warnings: list[str] = []
        seen: set[str] = set()
        left = budget
        for index, ref in enumerate(refs):
            session = self._session(ref, current_session_id, warnings)
            if session is None or session.id in seen:
                continue
            seen.add(session.id)
            share = left // max(1, len(refs) - index)
            text = self._one(ref, session, share, warnings)
            left -= self.count(text)
            parts.append(text)
        if not parts:
            return SessionBlock("", warnings)
        return SessionBlock("--- Referenced sessions ---\n\n" + "\n\n".join(parts), warnings)

    def _session(self, ref: Reference, current: str | None,
                 warnings: list[str]) -> Session | None:
        names = [ref.target]
        if self.aliases is not None and self.aliases(ref.target) != ref.target:
            names.append(self.aliases(ref.target))
        session = None
        for name in names:
            try:
                session = self.store.resolve_session(name, owner=self.owner)
                break
            except AmbiguousReference as exc:
                warnings.append(f"{ref.raw}: unknown session ({exc.message}; give more of it)")
                return None
            except NotFound:
                continue
        if session is None:
            warnings.append(f"{ref.raw}: unknown session (no session of yours matches "
                            f"{ref.target!r})")
            return None
        if session.id == current:
            warnings.append(f"{ref.raw}: that is the current session; nothing attached")
            return None
        return session

    def _one(self, ref: Reference, session: Session, share: int, warnings: list[str]) -> str:
        projection = self.store.projection(session.id)
        spill_id = self._spill(projection, session, warnings, ref)
        head = f"### {ref.raw}: {session.title or '(untitled)'} (session {session.id})"
        if spill_id:
            head += (f"\nFull text: spill_id {spill_id} — read more with session_search "
                     f"mode=spill spill_id={spill_id}")
        body_budget = share - self.count(head)
        summary = projection.checkpoint.summary if projection.checkpoint else ""
        recent = [_line(r.message) for r in projection.messages[-RECENT_MESSAGES:]]
        body, cut = _fit(summary, recent, max(0, body_budget), self.count)
        if cut:
            warnings.append(f"{ref.raw}: cut to its share of the session budget ({share} tokens)")
        return f"{head}\n{body}" if body else head

    def _spill(self, projection: Projection, session: Session, warnings: list[str],
               ref: Reference) -> str | None:
        if self.spill is None:
            return None
        from refold.compaction.session import projection_messages  # the projection as sent

        text = "\n\n".join(_line(m, limit=None)
                           for m in projection_messages(projection, None))
        try:
            return self.spill.write(f"session {session.id} ({session.title or ''})\n\n{text}")
        except Exception as exc:  # a spill failure only loses the "read more" path
            warnings.append(f"{ref.raw}: could not spill the full session ({exc})")
            return None


def _line(message: Message, limit: int | None = MESSAGE_CHARS) -> str:
    text = content_text(message).strip()
    calls = message.get("tool_calls") or []
    if calls and not text:
        names = ", ".join(str((c.get("function") or {}).get("name")) for c in calls)
        text = f"(called {names})"
    if limit is not None and len(text) > limit:
        text = text[:limit] + f" …[+{len(text) - limit} chars]"
    return f"[{message.get('role')}] {text}"


def _fit(summary: str, recent: list[str], budget: int, count: CountFn) -> tuple[str, bool]:
    """Summary first (cut if needed), then as many of the newest messages as still fit."""
    cut = False
    pieces: list[str] = []
    if summary:
        text, cut = cut_to(f"Latest summary:\n{summary}", budget, count)
        if text:
            pieces.append(text)
            budget -= count(text)
    kept: list[str] = []
    for line in reversed(recent):
        cost = count(line) + 1
        if cost > budget:
            cut = True
            break
        kept.append(line)
        budget -= cost
    if kept:
        pieces.append("Most recent messages:\n" + "\n".join(reversed(kept)))
    return "\n".join(pieces), cut


__all__ = ["SessionBlock", "SessionReferences"]
