"""``MemoryManager``: the builtin provider plus at most one external provider, run together.

Invariants:
- at most one external provider: adding a second raises ``InvalidInput`` naming both;
- the system-prompt block is merged once per session and then frozen (byte-identical);
- tool calls route to the provider that first declared the tool name (later clashes are
  logged and ignored);
- a provider that raises is isolated: the failure is logged (without content) and the other
  providers go on; a failing tool call answers the model with an error result;
- ``sync_turn`` and ``queue_prefetch`` run on one background worker thread, in order, so the
  main turn never waits on a provider; ``flush`` waits for it (tests, shutdown);
- ``shutdown`` drains the worker, waits for a running review, then shuts providers down in
  reverse order of registration.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from refold.errors import InvalidInput
from refold.memory.actions import MemoryStore
from refold.memory.provider import BuiltinMemoryProvider, MemoryProvider
from refold.memory.review import DEFAULT_TOOL_ITERATIONS, DEFAULT_TURNS, MemoryReviewer
from refold.messages.model import Message

if TYPE_CHECKING:
    from refold.llm.client import ChatClient

log = logging.getLogger(__name__)

T = TypeVar("T")
_STOP = object()


class _Worker:
    """One daemon thread running queued callables in order; failures are logged."""

    def __init__(self) -> None:
        self._queue: queue.Queue[Any] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="refold-memory", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            try:
                if job is _STOP:
                    return
                job()
            except Exception:  # the guard already logs provider errors; this is a last resort
                log.exception("memory background job failed")
            finally:
                self._queue.task_done()

    def submit(self, job: Callable[[], None]) -> None:
        self._queue.put(job)

    def flush(self) -> None:
        self._queue.join()

    def stop(self, timeout: float = 30.0) -> None:
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join(timeout)


class MemoryManager:
    """Runs memory providers for one agent session."""

    def __init__(self, builtin: BuiltinMemoryProvider | None = None, *,
                 reviewer: MemoryReviewer | None = None) -> None:
        self.builtin = builtin
        self.reviewer = reviewer
        self.providers: list[MemoryProvider] = [builtin] if builtin is not None else []
        self._tools: dict[str, MemoryProvider] = {}
        self._schemas: list[dict[str, Any]] = []
        self._block: str | None = None
        self._prefetched: list[str] = []
        self._lock = threading.Lock()
        self._worker = _Worker()
        self._closed = False
        if builtin is not None:
            self._register_tools(builtin)

    @classmethod
    def for_store(cls, store: MemoryStore, *, approval: str = "allow",
                  chat: ChatClient | None = None, model: str | None = None,
                  external: MemoryProvider | None = None,
                  review_every_turns: int = DEFAULT_TURNS,
                  review_every_tool_iterations: int = DEFAULT_TOOL_ITERATIONS) -> MemoryManager:
        """The usual set-up: builtin provider (snapshot taken now), reviewer, optional external."""
        builtin = BuiltinMemoryProvider(store, approval=approval)
        reviewer = MemoryReviewer(builtin.writer, chat=chat, model=model,
                                  every_turns=review_every_turns,
                                  every_tool_iterations=review_every_tool_iterations)
        manager = cls(builtin, reviewer=reviewer)
        if external is not None:
            manager.add_provider(external)
        return manager

    @property
    def store(self) -> Any:
        return self.builtin.store if self.builtin is not None else None

    @property
    def external(self) -> MemoryProvider | None:
        return next((p for p in self.providers if p is not self.builtin), None)

    def add_provider(self, provider: MemoryProvider) -> None:
        """Register the external provider; a second one is refused."""
        current = self.external
        if current is not None:
            raise InvalidInput(
                f"only one external memory provider can run at a time: {current.name!r} is "
                f"active, {provider.name!r} was refused",
                hint="choose one provider in the configuration")
        self.providers.append(provider)
        self._register_tools(provider)

    def _register_tools(self, provider: MemoryProvider) -> None:
        none: list[dict[str, Any]] = []
        schemas = self._guard(provider, "tool_schemas", provider.tool_schemas, none)
        for schema in schemas:
            name = str(schema.get("function", {}).get("name", ""))
            if name in self._tools:
                log.warning("memory tool %r from %s ignored: %s already provides it",
                            name, provider.name, self._tools[name].name)
                continue
            self._tools[name] = provider
            self._schemas.append(schema)

    def _guard(self, provider: MemoryProvider, hook: str, call: Callable[[], T], fallback: T) -> T:
        try:
            return call()
        except Exception as exc:
            log.warning("memory provider %s failed in %s: %s", provider.name, hook,
                        exc.__class__.__name__)
            log.debug("memory provider failure detail", exc_info=True)
            return fallback

    # -- prompt and tools -----------------------------------------------------------------
    def system_prompt_block(self) -> str:
        """The merged block, computed at the first call of the session and then frozen."""
        with self._lock:
            if self._block is None:
                blocks = [self._guard(p, "system_prompt_block", p.system_prompt_block, "")
                          for p in self.providers]
                self._block = "\n\n".join(b for b in blocks if b)
            return self._block

    def tool_schemas(self) -> list[dict[str, Any]]:
        return list(self._schemas)

    def handle_tool_call(self, name: str, arguments: str | Mapping[str, Any]) -> str:
        provider = self._tools.get(name)
        if provider is None:
            return json.dumps({"success": False, "error": f"no memory tool named {name!r}"})
        failed = json.dumps({"success": False,
                             "error": f"the {provider.name} memory provider failed; continue "
                                      "without it"})
        return self._guard(provider, "handle_tool_call",
                           lambda: provider.handle_tool_call(name, arguments), failed)

    # -- background hooks -----------------------------------------------------------------
    def queue_prefetch(self, query: str) -> None:
        """Ask every provider for recall on the worker; ``take_prefetched`` collects it."""
        def job() -> None:
            found = [self._guard(p, "prefetch", partial(p.prefetch, query), "")
                     for p in self.providers]
            with self._lock:
                self._prefetched.extend(text for text in found if text)
        self._worker.submit(job)

    def take_prefetched(self) -> str:
        with self._lock:
            texts, self._prefetched = self._prefetched, []
        return "\n\n".join(texts)

    def sync_turn(self, messages: Sequence[Message], *,
                  tool_iterations: int | None = None, session_id: str = "") -> None:
        """After a turn of ``session_id``: providers sync on the worker (in place for one that
        sets ``sync_inline``); the reviewer counts the turn toward that session's review."""
        snapshot = list(messages)
        for provider in self.providers:
            job = partial(self._guard, provider, "sync_turn", partial(provider.sync_turn, snapshot),
                          None)
            if getattr(provider, "sync_inline", False):
                job()  # declared cheap and thread-safe (the builtin provider): no thread wake-up
            else:
                self._worker.submit(job)
        if self.reviewer is not None:
            self.reviewer.note_turn(snapshot, tool_iterations=tool_iterations,
                                    session_id=session_id)

    def on_pre_compress(self, messages: Sequence[Message]) -> str:
        """What the providers want kept in the summary: their non-empty returns joined by a
        blank line, a failing provider (or a non-string return) contributing nothing."""
        notes = [self._guard(p, "on_pre_compress", partial(p.on_pre_compress, messages), "")
                 for p in self.providers]
        return "\n\n".join(n for n in notes if isinstance(n, str) and n.strip())

    def on_session_end(self) -> None:
        self.flush()
        for provider in self.providers:
            self._guard(provider, "on_session_end", provider.on_session_end, None)

    def flush(self) -> None:
        """Wait until queued syncs and prefetches have run."""
        self._worker.flush()

    def shutdown(self) -> None:
        """Drain the worker, wait for reviews, shut providers down in reverse (once)."""
        if self._closed:
            return
        self._closed = True
        self._worker.flush()
        self._worker.stop()
        if self.reviewer is not None:
            self.reviewer.join()
        for provider in reversed(self.providers):
            self._guard(provider, "shutdown", provider.shutdown, None)
