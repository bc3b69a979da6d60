"""``Engine``: the process-wide half of the runtime — store, model budget, memory, workers.

One ``Engine`` per process (or per tenant in the proxy) opens ``SessionRuntime`` objects. It owns
the thread pool that runs background pre-compaction and memory review, and ``close()`` joins that
pool so no in-flight record or checkpoint is lost at shutdown.

Session references resolve like the CLI: an exact id, a unique id prefix or a title; resuming
follows the lineage to its latest descendant with messages (``Store.resolve_resume``).

Memory provider hooks (``refold.memory`` external providers, via ``MemoryLink``): recall is taken
and queued when a user turn starts (``refold.runtime.recall`` says where it goes), ``sync_turn``
runs after each completed turn, ``on_pre_compress`` sees the rows a checkpoint is about to
replace (what it returns is kept in that checkpoint's summary), ``on_session_end`` runs when a runtime is closed (``SessionRuntime.close``, the proxy's
eviction) and for every runtime still open (still referenced) when the engine closes. A failing
provider never breaks a turn. The builtin memory's flush (``refold.runtime.memory_flush``) runs
after every checkpoint commit and session end, on the worker pool; the entries a runtime's
snapshot shows get their last-used time after its first completed turn.

Past-session recall (``recall=ArchiveRecall(...)``, off by default): each new user message is
searched in the owner's archive, outside the current session's lineage, and the best snippets
join that turn's recall block (``archive_recall``; a search, so the proxy runs it off its event
loop). ``indexer`` (``refold.search.indexer``, owned by the caller) hears of each finished turn so
new messages are embedded soon, never on the write path.

``Engine`` is the ``RuntimeHost`` (``refold.runtime.host``) of the runtimes it opens: they see
it only through that Protocol, so this module imports the runtime and never the other way.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import uuid
import weakref
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from refold.errors import Conflict, InvalidInput, NotFound, WouldBlock
from refold.runtime.context import ContextOps
from refold.runtime.cost import CostBook, paying_for
from refold.runtime.memory_flush import MemoryFlush
from refold.runtime.memory_link import MemoryLink, Shown
from refold.runtime.precompact import plan_is_current
from refold.runtime.recall import ARCHIVE_NOTE, recall_block
from refold.runtime.session import SessionRuntime
from refold.store.base import Session, Store

if TYPE_CHECKING:
    from refold.compaction.policy import CompactionPolicy
    from refold.llm import ChatClient
    from refold.references import ReferenceExpander
    from refold.references.link import ReferenceLink
    from refold.runtime.precompact import Plan
    from refold.search.indexer import BackgroundIndexer
    from refold.search.recall import ArchiveRecall
    from refold.skills import SkillLibrary
    from refold.skills.review import SkillReviewer

log = logging.getLogger(__name__)

REVIEW_WINDOW = 40  # the recent messages a finished turn hands to memory review
SNAPSHOT_EVENT = "memory_snapshot"  # a session's frozen memory snapshot (_session_snapshot)


def frozen_snapshot(store: Store, session_id: str) -> str | None:
    """The memory snapshot frozen into ``session_id``'s system prompt: its own, else its
    lineage's nearest (a compaction child, a branch); None when none of them has one yet."""
    for sid in [session_id, *(s.id for s in store.ancestors(session_id))]:
        kept = store.list_events(sid, SNAPSHOT_EVENT)
        if kept:
            return str(kept[0].payload.get("text") or "")
    return None


class Engine:
    """Opens sessions over ``store`` for one model and context window."""

    def __init__(self, store: Store, *, model: str, context_length: int, owner: str = "",
                 memory_dir: Path | None = None, memory: Any | None = None,
                 summarizer: Any | None = None, chat_client: ChatClient | None = None,
                 policy: CompactionPolicy | None = None,
                 background_precompact: bool = True,
                 references: ReferenceExpander | None = None,
                 skills: SkillLibrary | None = None,
                 skill_review: SkillReviewer | None = None,
                 cost: CostBook | None = None,
                 recall: ArchiveRecall | None = None,
                 indexer: BackgroundIndexer | None = None) -> None:
        if context_length <= 0:
            raise InvalidInput(f"context_length must be positive, got {context_length}")
        self.store = store
        self.model = model
        self.owner = owner
        self.chat_client = chat_client
        self.background_precompact = background_precompact
        self.references = references  # expands @session/@file… in what is sent (None: off)
        self.skills = skills  # layer 4: its index joins the frozen snapshot
        self.skill_review = skill_review  # proposes skills after enough tool work
        self.cost = cost if cost is not None else CostBook(store)  # prices, budget, charges
        self.recall = recall  # past-session recall into each user turn (None: off)
        self.indexer = indexer  # embeds new messages in the background (None: none)
        self.ops = ContextOps(model=model, context_length=context_length, policy=policy,
                              summarizer=summarizer, chat_client=chat_client, cost=self.cost)
        self.memory: MemoryLink | None = (
            MemoryLink.wrap(memory) if memory is not None
            else MemoryLink.from_dir(Path(memory_dir), chat_client=chat_client, model=model)
            if memory_dir is not None else None)
        self.executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="refold-bg")
        self._flush = (MemoryFlush(store, self.memory, self.executor)
                       if self.memory is not None else None)
        # per open runtime: the memory entries its frozen snapshot shows, until a turn uses it
        self._unused: weakref.WeakKeyDictionary[SessionRuntime, Shown] = \
            weakref.WeakKeyDictionary()
        self.holder = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._closed = False
        self._closing = False  # close() started (after-turn work still runs until _closed)
        self._lock = threading.Lock()
        self._open: weakref.WeakSet[SessionRuntime] = weakref.WeakSet()  # not closed yet

    # -- sessions ------------------------------------------------------------------------------
    def open_session(self, ref: str | None = None, *, new: bool = False,
                     title: str | None = None, source: str | None = None,
                     branch_at: int | None = None, by_prefix: bool = True) -> SessionRuntime:
        """Open a runtime: ``new``, ``ref`` (id / prefix / title, resumed), or the latest.
        ``by_prefix=False``: ``ref`` is a name — an exact id or title, never an id prefix."""
        session = self._resolve(ref, new=new, title=title, source=source, branch_at=branch_at,
                                by_prefix=by_prefix)
        snapshot, shown = self._session_snapshot(session.id)
        runtime = SessionRuntime(self, session.id, snapshot=snapshot)
        if self._flush is not None:
            with self._lock:
                self._unused[runtime] = shown
            self._flush.opened(session.id)  # recovers a span a dead process never flushed
        if not new:  # a resumed session sees its open goal, plan and tasks once
            from refold.tools.todo import load_task_state, render_task_state

            runtime.show_once(render_task_state(load_task_state(self.store, session.id)))
        with self._lock:
            self._open.add(runtime)
        return runtime

    def open_named(self, name: str, *, source: str | None = None) -> SessionRuntime:
        """The session named exactly ``name`` (its id or title, never an id prefix: a short
        name must not open another's session), created with that title on first use. When
        another writer creates it between the lookup and the creation (two processes or
        threads using a new name at once), the title is taken: that session is opened."""
        try:
            return self.open_session(name, source=source, by_prefix=False)
        except NotFound:
            pass
        try:
            return self.open_session(new=True, title=name, source=source)
        except Conflict:  # created a moment ago by another writer: store into it too
            return self.open_session(name, source=source, by_prefix=False)

    def _resolve(self, ref: str | None, *, new: bool, title: str | None, source: str | None,
                 branch_at: int | None, by_prefix: bool = True) -> Session:
        if new:
            if ref is not None:
                raise InvalidInput("give either a session reference or new=True, not both")
            return self._create(title, source)
        if ref is not None:
            session = self.store.resolve_session(ref, owner=self.owner, prefix=by_prefix)
        else:
            latest = self.store.list_sessions(limit=1, owner=self.owner)
            if not latest:
                return self._create(title, source)
            session = latest[0]
        if branch_at is not None:
            from refold.compaction.session import fork_with_state

            return fork_with_state(self.store, session.id, branch_at, kind="branch", title=title)
        return self.store.resolve_resume(session.id)

    def _create(self, title: str | None, source: str | None) -> Session:
        return self.store.create_session(title=title, source=source, model=self.model,
                                         owner=self.owner)

    def reference_link(self) -> ReferenceLink | None:
        """A new session runtime's link to the reference expander (None when off)."""
        if self.references is None:
            return None
        from refold.references.link import ReferenceLink

        return ReferenceLink(self.references, self.store,
                             context_length=self.ops.context_length)

    # -- memory -------------------------------------------------------------------------------
    def _session_snapshot(self, session_id: str) -> tuple[str, Shown]:
        """The memory snapshot (and skills index) of ``session_id``: frozen when the session
        (or the nearest session of its lineage: a compaction child, a branch) was first
        opened, kept in the ledger as a ``memory_snapshot`` event, so every process serving
        it — other workers, the next ``refold serve``, a resumed chat — sends the same system
        prompt (a provider's prompt cache stays warm; memory written meanwhile shows in new
        sessions). A session opened the first time: rendered now and kept."""
        if self.memory is None and self.skills is None:
            return "", ()
        frozen = frozen_snapshot(self.store, session_id)
        if frozen is not None:
            return frozen, ()
        memory, shown = self._memory_snapshot()
        snapshot = self._render_snapshot(memory)
        self.store.append_event(session_id, SNAPSHOT_EVENT, {"text": snapshot})
        kept = self.store.list_events(session_id, SNAPSHOT_EVENT)  # two processes at once: the
        first = str(kept[0].payload.get("text") or "")  # first kept is everyone's
        return first, shown if first == snapshot else ()

    def _render_snapshot(self, memory: str) -> str:
        parts = [memory, self._skills_index()]
        return "\n\n".join(p for p in parts if p)

    def _memory_snapshot(self) -> tuple[str, Shown]:
        if self.memory is None:
            return "", ()
        try:
            return self.memory.frozen()
        except Exception as exc:  # a broken memory provider must not stop the session
            log.warning("memory snapshot failed, continuing without it: %s", exc)
            return "", ()

    def _mark_used(self, runtime: SessionRuntime) -> None:
        """The runtime's first completed turn used its snapshot: stamp those entries' last-used
        time on the worker (never on the turn's path)."""
        with self._lock:
            shown = self._unused.pop(runtime, ())
        if shown and self.memory is not None:
            memory = self.memory
            with contextlib.suppress(RuntimeError):  # closing: a stamp is a nicety, not data
                self.executor.submit(_best_effort, memory.mark_used, shown)

    def _skills_index(self) -> str:
        """Names and descriptions only (progressive disclosure: bodies via skill_manage)."""
        if self.skills is None:
            return ""
        from refold.skills import skills_index

        try:
            return skills_index(self.skills)
        except Exception as exc:  # an unreadable library must not stop the session
            log.warning("skills index failed, continuing without it: %s", exc)
            return ""

    def _review_skills(self, runtime: SessionRuntime, tool_iterations: int) -> None:
        """Count the turn's tool work; at the interval, queue a skill review (never waits)."""
        review = self.skill_review
        if review is None or self._closing or not review.due(runtime.session_id,
                                                             tool_iterations):
            return
        session_id = runtime.session_id

        def load() -> tuple[str, list[Any]]:  # on the worker: the turn never reads for it
            title = self.store.get_session(session_id).title or ""
            return title, [r.message for r in
                           self.store.get_messages(session_id)[-REVIEW_WINDOW:]]

        self.executor.submit(review.run, load)

    def after_turn(self, runtime: SessionRuntime, tool_iterations: int) -> None:
        """A user turn completed: hand it to memory (sync + background review) and count it
        for skill review."""
        if self._closed:
            return
        if self.indexer is not None:
            self.indexer.nudge()
        with paying_for(runtime.session_id):  # a review this starts is charged to this session
            self._after_turn(runtime, tool_iterations)

    def _after_turn(self, runtime: SessionRuntime, tool_iterations: int) -> None:
        self._review_skills(runtime, tool_iterations)
        if self.memory is None:
            return
        self._mark_used(runtime)
        try:
            # the last 40 active rows up to the reply just stored (the whole ledger would be
            # O(history)): from the runtime's view when it is current, else read; the reply's
            # seq is known unless the session rotated since
            cached = runtime.recent_rows(REVIEW_WINDOW)
            if cached is not None:
                self.memory.after_turn(cached, tool_iterations=tool_iterations,
                                       session_id=runtime.session_id)
                return
            known = runtime.last_reply
            if known is not None and known[0] == runtime.session_id:
                seq: int | None = known[1]
            else:
                last = self.store.last_message(runtime.session_id)
                seq = last.seq if last is not None else None
            rows = [] if seq is None else self.store.messages_around(
                runtime.session_id, seq, before=REVIEW_WINDOW - 1, after=0)
            self.memory.after_turn([r.message for r in rows], tool_iterations=tool_iterations,
                                   session_id=runtime.session_id)
        except WouldBlock:
            raise  # a light-mode caller hands the turn to a thread (SessionRuntime.record)
        except Exception as exc:  # review is best effort; the turn already succeeded
            log.warning("memory review scheduling failed: %s", exc)

    def turn_recall(self, user_text: str) -> str:
        """A user turn starts: the marked recall block ready now ("" if none), and a prefetch
        for ``user_text`` queued for later (external providers only; never waits)."""
        if self.memory is None or self._closed or not self.memory.has_external:
            return ""
        block = recall_block(self.memory.take_recall())
        self.memory.queue_recall(user_text)
        return block

    @property
    def recalls_archive(self) -> bool:
        return self.recall is not None and not self._closed

    def archive_recall(self, user_text: str, session_id: str) -> str:
        """The marked block of past-session snippets for a new user message of ``session_id``
        ("" when off or nothing relevant); searches the store, so it may wait on it."""
        if self.recall is None or self._closed:
            return ""
        return recall_block(self.recall.text(self.store, user_text, session_id=session_id,
                                             owner=self.owner), ARCHIVE_NOTE)

    def pre_compress(self, session_id: str, plan: Plan, *, validate: bool = False) -> str:
        """``plan``'s checkpoint is about to replace rows: show them to the memory provider
        (with ``validate``, a background plan, only if it still matches the ledger). Returns
        the text the providers want kept in the summary ("" when none or on failure)."""
        if self.memory is None or not self.memory.has_external or not plan.summarized:
            return ""
        try:
            if validate and not plan_is_current(self.store, session_id, plan):
                return ""
            rows = self.store.get_messages(session_id, start_seq=plan.summarized[0][0],
                                           end_seq=plan.summarized[-1][0])
            return self.memory.pre_compress([r.message for r in rows])
        except Exception as exc:  # a hook, never a reason to skip the compaction
            log.warning("memory pre-compress hook failed: %s", exc.__class__.__name__)
            return ""

    def session_closed(self, runtime: SessionRuntime) -> None:
        """``runtime`` was closed: the unflushed rows of every session it held (its first, and
        each branch or rotation child it moved to: ``SessionMirror.held``) go to memory review
        (background), and memory providers hear that its session ended."""
        with self._lock:
            self._open.discard(runtime)
        if self._flush is not None:
            for session_id in list(runtime.mirror.held):
                self._flush.session_end(session_id)
        if self.memory is not None:
            self.memory.session_end()

    def session_moved(self, session_id: str) -> None:
        """A runtime's turns continue in ``session_id`` (a branch, a rotation's child): it ends
        with that runtime, or with the engine when the runtime is dropped without ``close``."""
        if self._flush is not None:
            self._flush.held(session_id)

    def memory_flush(self, session_id: str, through_seq: int | None) -> None:
        """A checkpoint replaced ``session_id``'s rows up to ``through_seq`` (None: all, it
        rotated): review them for memory in the background (``refold.runtime.memory_flush``)."""
        if self._flush is not None:
            self._flush.after_checkpoint(session_id, through_seq)

    def flush_idle_sessions(self, idle_seconds: float, *, limit: int = 200) -> list[str]:
        """Review for memory, now, this owner's sessions that have unflushed rows and no new
        message for ``idle_seconds`` (a process that died before their end left them so); the
        ids flushed. Nothing when the engine has no builtin memory flush."""
        if self._flush is None:
            return []
        return self._flush.flush_idle(self.owner, idle_seconds, holder=f"{self.holder}/sweep",
                                      limit=limit)

    def flush_session(self, session_id: str) -> bool:
        """Review ``session_id``'s unflushed rows for memory now, idle or not (``refold memory
        flush --session``). False when there was nothing new (or no builtin memory flush)."""
        if self._flush is None:
            return False
        return self._flush.flush(session_id, None, "requested") is not None

    # -- lifecycle ------------------------------------------------------------------------------
    def close(self) -> None:
        """Finish background work (pre-compaction, memory review) and release resources."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
            open_now = list(self._open)
        for runtime in open_now:  # a turn whose after-turn work was held back still counts
            runtime.finish_turn(wait=True)
        with self._lock:
            self._closed = True
        self.executor.shutdown(wait=True)
        for runtime in list(self._open):  # sessions still open end with the engine
            runtime.close()
        if self._flush is not None:
            self._flush.close()  # runtimes dropped without close() end here too
        if self.memory is not None:
            try:
                self.memory.shutdown()
            except Exception as exc:
                log.warning("memory shutdown failed: %s", exc)

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _best_effort(job: Any, *args: Any) -> None:
    try:
        job(*args)
    except Exception as exc:  # bookkeeping on the worker; the turn already succeeded
        log.warning("memory bookkeeping failed: %s", exc.__class__.__name__)
