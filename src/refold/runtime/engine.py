"""``Engine``: the process-wide half of the runtime — store, model budget, memory, workers.

One ``Engine`` per process (or per tenant in the proxy) opens ``SessionRuntime`` objects. It owns
the thread pool that runs background pre-compaction and memory review, and ``close()`` joins that
pool so no in-flight record or checkpoint is lost at shutdown.

Session references resolve like the CLI: an exact id, a unique id prefix or a title; resuming
follows the lineage to its latest descendant with messages (``Store.resolve_resume``).
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from refold.errors import InvalidInput
from refold.runtime.context import ContextOps
from refold.runtime.memory_link import MemoryLink
from refold.runtime.session import SessionRuntime
from refold.store.base import Session, Store

if TYPE_CHECKING:
    from refold.compaction.policy import CompactionPolicy
    from refold.llm import ChatClient

log = logging.getLogger(__name__)

REVIEW_WINDOW = 40  # the recent messages a finished turn hands to memory review


class Engine:
    """Opens sessions over ``store`` for one model and context window."""

    def __init__(self, store: Store, *, model: str, context_length: int, owner: str = "",
                 memory_dir: Path | None = None, memory: Any | None = None,
                 summarizer: Any | None = None, chat_client: ChatClient | None = None,
                 policy: CompactionPolicy | None = None,
                 background_precompact: bool = True) -> None:
        if context_length <= 0:
            raise InvalidInput(f"context_length must be positive, got {context_length}")
        self.store = store
        self.model = model
        self.owner = owner
        self.chat_client = chat_client
        self.background_precompact = background_precompact
        self.ops = ContextOps(model=model, context_length=context_length, policy=policy,
                              summarizer=summarizer, chat_client=chat_client)
        self.memory: MemoryLink | None = (
            MemoryLink.wrap(memory) if memory is not None
            else MemoryLink.from_dir(Path(memory_dir), chat_client=chat_client, model=model)
            if memory_dir is not None else None)
        self.executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="refold-bg")
        self.holder = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._closed = False
        self._lock = threading.Lock()

    # -- sessions ------------------------------------------------------------------------------
    def open_session(self, ref: str | None = None, *, new: bool = False,
                     title: str | None = None, source: str | None = None,
                     branch_at: int | None = None) -> SessionRuntime:
        """Open a runtime: ``new``, ``ref`` (id / prefix / title, resumed), or the latest."""
        session = self._resolve(ref, new=new, title=title, source=source, branch_at=branch_at)
        return SessionRuntime(self, session.id, snapshot=self._render_snapshot())

    def _resolve(self, ref: str | None, *, new: bool, title: str | None, source: str | None,
                 branch_at: int | None) -> Session:
        if new:
            if ref is not None:
                raise InvalidInput("give either a session reference or new=True, not both")
            return self._create(title, source)
        if ref is not None:
            session = self.store.resolve_session(ref, owner=self.owner)
        else:
            latest = self.store.list_sessions(limit=1, owner=self.owner)
            if not latest:
                return self._create(title, source)
            session = latest[0]
        if branch_at is not None:
            return self.store.fork_session(session.id, branch_at, kind="branch", title=title)
        return self.store.resolve_resume(session.id)

    def _create(self, title: str | None, source: str | None) -> Session:
        return self.store.create_session(title=title, source=source, model=self.model,
                                         owner=self.owner)

    # -- memory -------------------------------------------------------------------------------
    def _render_snapshot(self) -> str:
        if self.memory is None:
            return ""
        try:
            return self.memory.snapshot()
        except Exception as exc:  # a broken memory provider must not stop the session
            log.warning("memory snapshot failed, continuing without it: %s", exc)
            return ""

    def after_turn(self, runtime: SessionRuntime, tool_iterations: int) -> None:
        """A user turn completed: hand it to memory (sync + background review)."""
        if self.memory is None or self._closed:
            return
        try:
            # the last 40 active rows, read as such: the whole ledger would be O(history)
            last = self.store.last_message(runtime.session_id)
            rows = [] if last is None else self.store.messages_around(
                runtime.session_id, last.seq, before=REVIEW_WINDOW - 1, after=0)
            self.memory.after_turn([r.message for r in rows], tool_iterations=tool_iterations)
        except Exception as exc:  # review is best effort; the turn already succeeded
            log.warning("memory review scheduling failed: %s", exc)

    # -- lifecycle ------------------------------------------------------------------------------
    def close(self) -> None:
        """Finish background work (pre-compaction, memory review) and release resources."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self.executor.shutdown(wait=True)
        if self.memory is not None:
            try:
                self.memory.shutdown()
            except Exception as exc:
                log.warning("memory shutdown failed: %s", exc)

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

