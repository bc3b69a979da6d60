"""The runtime's link to layer 2: the frozen snapshot, the ``memory`` tool, background review.

``MemoryLink`` holds one engine's ``refold.memory.MemoryManager`` (the builtin MEMORY.md /
USER.md provider, at most one external provider, and the background reviewer). The snapshot is
rendered when a session opens and the ``SessionRuntime`` keeps it frozen; writes made
mid-session reach disk at once and show in the next session's snapshot. After each completed
user turn the manager syncs providers and counts the turn for background review (which runs on
its own thread and never writes to the session ledger).

The external provider's lifecycle hooks are driven from here (every call goes through the
manager, which isolates a failing provider, and is guarded again so a foreign manager cannot
break a turn either): ``queue_recall`` / ``take_recall`` (prefetch on the manager's worker, the
turn never waits for it), ``pre_compress`` before a checkpoint replaces messages, ``session_end``
when a session runtime closes. With no external provider they cost nothing.

The builtin side: ``flush`` runs the reviewer over a span now (``refold.runtime.memory_flush``
decides when), and ``mark_used`` stamps the entries a used snapshot showed — "used" meaning a
session's first completed turn sent that snapshot to the model.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from refold.messages.model import Message

log = logging.getLogger(__name__)

Shown = tuple[tuple[str, tuple[str, ...]], ...]  # (target, entry texts) a snapshot shows


class MemoryLink:
    """Snapshot, tool and review hooks over one ``MemoryManager``."""

    def __init__(self, manager: Any) -> None:
        self.manager = manager

    @classmethod
    def from_dir(cls, directory: Path, *, approval: str = "allow", chat_client: Any = None,
                 model: str | None = None) -> MemoryLink:
        """A manager over MEMORY.md / USER.md in ``directory`` with background review (LLM
        review when ``chat_client`` is given, the deterministic extractor otherwise)."""
        from refold.memory import open_file_store

        return cls.for_store(open_file_store(directory), approval=approval,
                             chat_client=chat_client, model=model)

    @classmethod
    def for_store(cls, store: Any, *, approval: str = "allow", chat_client: Any = None,
                  model: str | None = None) -> MemoryLink:
        from refold.memory.manager import MemoryManager
        from refold.memory.provider import BuiltinMemoryProvider
        from refold.memory.review import MemoryReviewer

        builtin = BuiltinMemoryProvider(store, approval=approval)
        reviewer = MemoryReviewer(builtin.writer, chat=chat_client, model=model)
        return cls(MemoryManager(builtin, reviewer=reviewer))

    @classmethod
    def wrap(cls, memory: Any) -> MemoryLink:
        """Accept a ``MemoryLink``, a ``MemoryManager`` or a ``MemoryStore``."""
        from refold.memory import MemoryStore

        if isinstance(memory, MemoryLink):
            return memory
        if isinstance(memory, MemoryStore):
            return cls.for_store(memory)
        return cls(memory)

    @property
    def store(self) -> Any:
        return self.manager.store

    @property
    def memory_tool(self) -> Any:
        """The builtin provider's ``MemoryTool`` (None when the manager has no builtin)."""
        builtin = getattr(self.manager, "builtin", None)
        return builtin.tool if builtin is not None else None

    def snapshot(self) -> str:
        """The system-prompt block as of now (the caller freezes it for a session)."""
        return self.frozen()[0]

    def frozen(self) -> tuple[str, Shown]:
        """The system-prompt block as of now and the builtin entries it shows, by target (for
        ``mark_used`` once a turn has used it)."""
        from refold.memory import take_snapshot

        shown: Shown = ()
        parts: list[str] = []
        if self.store is not None:
            snap = take_snapshot(self.store)
            parts.append(snap.text)
            shown = snap.shown
        external = getattr(self.manager, "external", None)
        if external is not None:
            try:
                parts.append(str(external.system_prompt_block() or ""))
            except Exception as exc:  # an external provider never breaks the session
                log.warning("memory provider %s failed: %s", getattr(external, "name", "?"),
                            exc)
        return "\n\n".join(p for p in parts if p), shown

    def mark_used(self, shown: Shown) -> None:
        """A completed turn sent a snapshot showing ``shown``: stamp their last-used time."""
        for target, texts in shown:
            self.store.mark_used(target, texts)

    # -- flush (refold.runtime.memory_flush) -------------------------------------------------
    @property
    def can_flush(self) -> bool:
        return getattr(self.manager, "reviewer", None) is not None

    def flush(self, messages: Sequence[Message]) -> Any:
        """Review ``messages`` now for memory (the reviewer's report; None without one)."""
        reviewer = getattr(self.manager, "reviewer", None)
        return reviewer.flush(messages) if reviewer is not None else None

    def begin_turn(self, warn: Callable[[str], None] | None = None,
                   session_id: str = "") -> None:
        """A user turn begins: the memory tool's per-turn budget resets, and what background
        reviews of ``session_id``'s earlier turns refused to save (memory full, a scan) goes to
        ``warn`` (the turn's warnings, ``X-Refold-Warnings``): an explicit "remember that …"
        refused for a full memory was said nowhere."""
        tool = self.memory_tool
        if tool is not None:
            tool.begin_turn()
        reviewer = getattr(self.manager, "reviewer", None)
        take = getattr(reviewer, "take_warnings", None)
        if warn is not None and take is not None:
            for sentence in take(session_id):
                warn(sentence)

    def after_turn(self, messages: Sequence[Message], *, tool_iterations: int,
                   session_id: str = "") -> None:
        """A user turn of ``session_id`` completed: providers sync and the reviewer counts it
        toward that session's review (background)."""
        self.manager.sync_turn(list(messages), tool_iterations=tool_iterations,
                               session_id=session_id)

    # -- external provider hooks -------------------------------------------------------------
    @property
    def has_external(self) -> bool:
        return getattr(self.manager, "external", None) is not None

    def _call(self, hook: str, *args: Any) -> Any:
        method = getattr(self.manager, hook, None)
        if method is None or not self.has_external:
            return None
        try:
            return method(*args)
        except Exception as exc:  # the manager isolates providers; this guards the manager
            log.warning("memory %s failed, continuing without it: %s", hook,
                        exc.__class__.__name__)
            return None

    def queue_recall(self, query: str) -> None:
        """Ask the external provider for recall about ``query`` (background)."""
        if query:
            self._call("queue_prefetch", query)

    def take_recall(self) -> str:
        """The recall that finished since the last call ("" when none is ready)."""
        return str(self._call("take_prefetched") or "")

    def pre_compress(self, messages: Sequence[Message]) -> str:
        """``messages`` are about to be replaced by a summary: let the provider keep notes."""
        return str(self._call("on_pre_compress", list(messages)) or "")

    def session_end(self) -> None:
        self._call("on_session_end")

    def shutdown(self) -> None:
        self.manager.shutdown()
