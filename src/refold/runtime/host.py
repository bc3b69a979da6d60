"""``RuntimeHost``: what a ``SessionRuntime`` needs from the process-wide ``Engine``.

A Protocol, so the runtime's modules never import ``refold.runtime.engine`` (the engine imports
them to open sessions; one direction only). ``Engine`` is the one implementation.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Protocol

from refold.runtime.context import ContextOps
from refold.store.base import Store

if TYPE_CHECKING:
    from refold.references.link import ReferenceLink
    from refold.runtime.memory_link import MemoryLink
    from refold.runtime.precompact import Plan
    from refold.runtime.session import SessionRuntime


class RuntimeHost(Protocol):
    """The store, the model budget, memory and the worker pool shared by one engine's runtimes."""

    store: Store
    ops: ContextOps
    memory: MemoryLink | None
    executor: ThreadPoolExecutor
    holder: str  # this process's compaction lease holder name
    background_precompact: bool

    def after_turn(self, runtime: SessionRuntime, tool_iterations: int) -> None: ...
    def turn_recall(self, user_text: str) -> str: ...  # the memory provider's (never waits)

    @property
    def recalls_archive(self) -> bool: ...  # past-session recall is on (it reads the store)

    def archive_recall(self, user_text: str, session_id: str) -> str: ...
    def pre_compress(self, session_id: str, plan: Plan, *, validate: bool = False) -> str: ...
    def session_closed(self, runtime: SessionRuntime) -> None: ...
    def session_moved(self, session_id: str) -> None: ...  # a runtime's turns go there now
    def memory_flush(self, session_id: str, through_seq: int | None) -> None: ...
    def reference_link(self) -> ReferenceLink | None: ...  # refold.references (None: off)
