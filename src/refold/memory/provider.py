"""Memory providers: the ``MemoryProvider`` Protocol, the builtin provider, entry-point loading.

A provider contributes a system-prompt block, recall for a query (``prefetch``), a hook after
each turn (``sync_turn``), one before compaction (``on_pre_compress``, returning text worth
keeping in the summary), one at session end, and tools. ``BuiltinMemoryProvider`` is MEMORY.md /
USER.md: its block is the frozen snapshot taken when it starts, its one tool is ``memory``.

External providers (Honcho-, Mem0-like backends) are Python packages that register a factory
under the entry-point group ``refold.memory_providers``; ``load_provider(name, **config)``
finds and builds one. The ``MemoryManager`` (``refold.memory.manager``) runs them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from importlib import metadata
from typing import Any, Protocol, runtime_checkable

from refold.errors import InvalidInput, NotFound
from refold.memory.actions import MemoryStore
from refold.memory.approval import MemoryWriter
from refold.memory.snapshot import FrozenSnapshot, take_snapshot
from refold.memory.tool import MemoryTool
from refold.messages.model import Message

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "refold.memory_providers"


@runtime_checkable
class MemoryProvider(Protocol):
    """What the manager calls on every memory provider.

    ``on_pre_compress(messages)`` is called with the ledger rows a checkpoint is about to
    replace, before the checkpoint is stored. It returns text the provider wants preserved
    across the compaction (facts it extracted, say) or "" for nothing. The manager joins the
    returns of its providers with a blank line (a provider that raises counts as ""); the
    runtime hands the result to compaction, which keeps each paragraph (clipped, deduplicated,
    at most a few) as reference text in the summary's Critical Context. A provider should keep
    its return short and must not put instructions or secrets in it.

    ``sync_turn`` runs on the manager's worker thread, in order, so a slow provider never
    delays a turn. A provider whose ``sync_turn`` is cheap and thread-safe may set the class
    attribute ``sync_inline = True`` to be called in place (the builtin provider does).
    """

    name: str

    def system_prompt_block(self) -> str: ...
    def prefetch(self, query: str) -> str: ...
    def sync_turn(self, messages: Sequence[Message]) -> None: ...
    def on_pre_compress(self, messages: Sequence[Message]) -> str: ...
    def on_session_end(self) -> None: ...
    def tool_schemas(self) -> list[dict[str, Any]]: ...
    def handle_tool_call(self, name: str, arguments: str | Mapping[str, Any]) -> str: ...
    def shutdown(self) -> None: ...


class BuiltinMemoryProvider:
    """MEMORY.md / USER.md as a provider: the frozen snapshot and the ``memory`` tool."""

    name = "builtin"
    # its sync_turn only resets the memory tool's per-turn budget: cheap and thread-safe, so the
    # manager calls it in place instead of waking its worker thread every turn
    sync_inline = True

    def __init__(self, store: MemoryStore, *, approval: str = "allow") -> None:
        self.store = store
        self.writer = MemoryWriter(store, approval)
        self.tool = MemoryTool(self.writer)
        self.snapshot: FrozenSnapshot = take_snapshot(store)

    def system_prompt_block(self) -> str:
        return self.snapshot.text

    def prefetch(self, query: str) -> str:
        return ""  # everything it knows is already in the snapshot

    def sync_turn(self, messages: Sequence[Message]) -> None:
        self.tool.begin_turn()

    def on_pre_compress(self, messages: Sequence[Message]) -> str:
        return ""

    def on_session_end(self) -> None:
        return None

    def tool_schemas(self) -> list[dict[str, Any]]:
        return [self.tool.schema()]

    def handle_tool_call(self, name: str, arguments: str | Mapping[str, Any]) -> str:
        return self.tool.handle(arguments)

    def shutdown(self) -> None:
        return None


def _entry_points() -> list[metadata.EntryPoint]:
    return list(metadata.entry_points(group=ENTRY_POINT_GROUP))


def available_providers() -> list[str]:
    """Names registered under the ``refold.memory_providers`` entry-point group."""
    return sorted({ep.name for ep in _entry_points()})


def load_provider(name: str, **config: Any) -> MemoryProvider:
    """Find the entry point ``name`` and build the provider from it with ``config``."""
    found = [ep for ep in _entry_points() if ep.name == name]
    if not found:
        known = ", ".join(available_providers()) or "none installed"
        raise NotFound(f"no memory provider named {name!r} (available: {known})",
                       hint="install the provider's package, which registers it under the "
                            f"'{ENTRY_POINT_GROUP}' entry-point group")
    try:
        factory: Callable[..., Any] = found[0].load()
        provider = factory(**config)
    except Exception as exc:  # a third-party package: any failure becomes one clear error
        raise InvalidInput(f"memory provider {name!r} failed to load: {exc}") from exc
    if not isinstance(provider, MemoryProvider):
        raise InvalidInput(f"memory provider {name!r} does not implement MemoryProvider")
    return provider


def __getattr__(name: str) -> Any:
    # ``MemoryManager`` lives in refold.memory.manager (it imports this module); kept reachable
    # here because the design names provider.py as its home.
    if name == "MemoryManager":
        from refold.memory.manager import MemoryManager

        return MemoryManager
    raise AttributeError(name)
