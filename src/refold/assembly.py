"""Settings → parts: the one place a surface's ``Settings`` become a store, a summarizer, a
tenant's memory and an ``Engine``.

``refold serve``, ``refold chat``, ``refold compact`` and ``refold sessions compact`` all build
their parts here, so the same settings give the same parts on every surface; neither ``cli/``
nor ``server/`` wires parts of its own, and ``server/`` never imports ``cli/``. Everything here
takes explicit arguments: no environment is read (``refold.config`` loads the settings).

Invariants:
- a tenant's memory is its own (its own directory, or its own database profile), so one
  client key's memory never reaches another key's snapshot;
- every HTTP client built here is owned by the ``SummarizerSetup`` (or ``EngineFactory``) that
  built it, and closed by its ``close``;
- one background indexer per store (``start_indexer``), shared by every tenant's engine and
  closed by its owner before the store.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from refold._records import dataclass, field
from refold.config import Settings
from refold.errors import InvalidInput, StorageError

if TYPE_CHECKING:
    from refold.compaction.policy import CompactionPolicy
    from refold.compaction.summarizer import Summarizer
    from refold.llm import ChatClient
    from refold.runtime.cost import CostBook
    from refold.runtime.engine import Engine
    from refold.runtime.memory_link import MemoryLink
    from refold.search.indexer import BackgroundIndexer
    from refold.search.recall import ArchiveRecall
    from refold.skills import SkillLibrary
    from refold.store.base import Store


def make_home(home: Path) -> None:
    """Create the data directory; a clear error (not a traceback) when it cannot be one."""
    try:
        home.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise InvalidInput(f"the refold home {home} is a file, not a directory",
                           hint="pass --home DIR or set REFOLD_HOME to a directory") from None
    except OSError as exc:
        raise StorageError(f"cannot create the refold home {home}: {exc.strerror or exc}",
                           hint="check its permissions, or pass --home DIR") from None


def open_configured_store(settings: Settings, *, sqlite_synchronous: str | None = None,
                          create: bool = True) -> Store:
    """The store ``settings.db_url`` names (the home is created for a SQLite default path).
    ``create=False`` (read commands): a PostgreSQL schema without refold data is NotFound."""
    from refold.store import open_store

    if "://" not in settings.db_url:
        make_home(settings.home)
        return open_store(settings.db_url, sqlite_synchronous=sqlite_synchronous)
    return open_store(settings.db_url, sqlite_synchronous=sqlite_synchronous, create=create)


def compaction_policy(settings: Settings) -> CompactionPolicy:
    """The compaction policy the settings describe (every field is a setting)."""
    return settings.compaction


@dataclass
class SummarizerSetup:
    """The summarizer plus the clients it owns (``close`` them when the surface stops)."""

    summarizer: Summarizer
    client: ChatClient | None = None  # the summary endpoint (also the memory reviewer's model)
    owned: list[Any] = field(default_factory=list)

    def close(self) -> None:
        for client in self.owned:
            client.close()
        self.owned.clear()


def summarizer_setup(settings: Settings, *, choice: str | None = None,
                     model: str | None = None) -> SummarizerSetup:
    """The summarizer ``choice`` (default ``settings.summarizer``) for main ``model``.

    ``summarizer_url`` / ``summarizer_model`` / ``summarizer_api_key`` default to ``upstream``
    / ``model`` / ``upstream_api_key``; the fallback to the main model goes to the main
    endpoint when the summary endpoint is another one.
    """
    from refold.runtime.summarizers import build_summarizer

    kind = choice or settings.summarizer
    model = model or settings.model
    if kind != "llm":
        return SummarizerSetup(build_summarizer(kind, model=model))
    from refold.llm import HttpChatClient

    url = settings.summarizer_url or settings.upstream
    if not url:
        raise InvalidInput("the llm summarizer needs an endpoint",
                           hint="set REFOLD_SUMMARIZER_URL or REFOLD_UPSTREAM (…/v1)")
    timeout = settings.summarizer_timeout
    client = HttpChatClient(url, settings.summarizer_api_key or settings.upstream_api_key,
                            timeout=timeout)
    owned: list[Any] = [client]
    main_client = None
    if settings.upstream and settings.upstream.rstrip("/") != url.rstrip("/"):
        main_client = HttpChatClient(settings.upstream, settings.upstream_api_key,
                                     timeout=timeout)
        owned.append(main_client)
    summarizer = build_summarizer("llm", model=model, client=client,
                                  summarizer_model=settings.summarizer_model,
                                  main_client=main_client, timeout=timeout,
                                  cache_friendly=settings.summarizer_cache_friendly,
                                  abort_on_failure=settings.abort_on_summary_failure,
                                  # (the summary model's window: the main one's unless known)
                                  context_length=settings.context_length or None)
    return SummarizerSetup(summarizer, client, owned)


def tenant_memory_dir(settings: Settings, owner: str) -> Path:
    """Where a tenant's MEMORY.md / USER.md live: the local dir, or one per client key."""
    if not owner:
        return settings.memories_dir
    return settings.home / "tenants" / owner / "memories"


def tenant_skills(settings: Settings, store: Store | None, owner: str, *,
                  mode: str | None = None) -> SkillLibrary:
    """A tenant's skills library: ``<home>/skills`` (a client key's under ``tenants/``), or
    its own database profile with ``memory_backend = "db"``. ``mode`` defaults to
    ``memory_approval``."""
    from refold.skills import DBSkills, FileSkills, SkillLibrary

    mode = mode or settings.memory_approval
    if settings.memory_backend == "db":
        if store is None:
            raise InvalidInput("memory_backend = db keeps skills in the database: open it first")
        profile = settings.memory_profile if not owner else f"{settings.memory_profile}:{owner}"
        return SkillLibrary(DBSkills(store, profile), mode=mode)
    folder = settings.home / "skills" if not owner else settings.home / "tenants" / owner / "skills"
    return SkillLibrary(FileSkills(folder), mode=mode)


def tenant_memory(settings: Settings, store: Store, owner: str,
                  chat_client: ChatClient | None) -> MemoryLink | None:
    """The tenant's memory: its own files, or its own profile in the database (memory_backend),
    plus the external ``memory_provider`` when one is configured (an instance per tenant).

    The local owner uses ``memory_profile``; a client key's tenant gets a profile of its own, so
    one key's memory never reaches another key's snapshot. ``memory_enabled = false``: None
    (no snapshot, no memory tool, no review).
    """
    if not settings.memory_enabled:
        return None
    link = _builtin_memory(settings, store, owner, chat_client)
    if settings.memory_provider:
        from refold.memory.provider import load_provider

        link.manager.add_provider(load_provider(settings.memory_provider))
    return link


def memory_store(settings: Settings, store: Store, owner: str = "") -> Any:
    """The tenant's (``owner``; "" the local one) MemoryStore as configured: its backend
    (files or the database profile) and its character limits."""
    return _memory_store(settings, store, owner)


def memory_limits(settings: Settings) -> dict[str, int]:
    """The character bound of each memory target, as configured."""
    return {"memory": settings.memory_char_limit, "user": settings.user_char_limit}


def _memory_store(settings: Settings, store: Store, owner: str) -> Any:
    limits = memory_limits(settings)
    if settings.memory_backend == "db":
        from refold.memory.db import DBMemoryStore

        profile = settings.memory_profile if not owner else f"{settings.memory_profile}:{owner}"
        return DBMemoryStore(store, profile, limits=limits)
    if settings.memory_backend != "file":
        raise InvalidInput(f"unknown memory_backend {settings.memory_backend!r}",
                           hint="use file or db")
    from refold.memory import open_file_store

    return open_file_store(tenant_memory_dir(settings, owner), limits=limits)


def _builtin_memory(settings: Settings, store: Store, owner: str,
                    chat_client: ChatClient | None) -> MemoryLink:
    """The builtin provider over the tenant's memory store, with review at the configured
    intervals (LLM review over ``chat_client``, the summary endpoint, when there is one)."""
    from refold.memory.manager import MemoryManager
    from refold.memory.provider import BuiltinMemoryProvider
    from refold.memory.review import MemoryReviewer
    from refold.runtime.memory_link import MemoryLink

    builtin = BuiltinMemoryProvider(_memory_store(settings, store, owner),
                                    approval=settings.memory_approval)
    reviewer = MemoryReviewer(
        builtin.writer, chat=chat_client, model=settings.summarizer_model or settings.model,
        every_turns=settings.memory_review_every_turns,
        every_tool_iterations=settings.memory_review_every_tool_iterations)
    return MemoryLink(MemoryManager(builtin, reviewer=reviewer))


def archive_recall(settings: Settings) -> ArchiveRecall | None:
    """Past-session recall as configured (``[recall]``; None: off, the default)."""
    if not settings.recall_enabled:
        return None
    from refold.search.recall import ArchiveRecall

    return ArchiveRecall(limit=settings.recall_limit, max_tokens=settings.recall_max_tokens,
                         mode=settings.recall_mode)


def start_indexer(settings: Settings, store: Store) -> BackgroundIndexer | None:
    """The store's background embedding thread, started, or None (``embed_background`` off,
    or the ``refold[embed]`` extra missing). With ``auto`` it waits, without loading the model,
    until the archive holds vectors of the default model (``refold index`` ran, also later or
    from another process), then keeps them current."""
    from refold.search.vectors import E5Embedder, embed_available

    if settings.embed_background == "off" or not embed_available():
        return None
    from refold.search.indexer import BackgroundIndexer

    wait = E5Embedder.model if settings.embed_background == "auto" else None
    return BackgroundIndexer(store, once_indexed=wait).start()


def build_engine(settings: Settings, store: Store, setup: SummarizerSetup, *,
                 owner: str = "", refs_root: Path | None = None,
                 session_aliases: Callable[[str, str], str] | None = None,
                 indexer: BackgroundIndexer | None = None) -> Engine:
    """The engine for ``owner`` over ``store``: model budget, summarizer, policy, memory,
    reference expansion (``@session`` among the owner's sessions; the local kinds under
    ``refs_root``, off when None; ``session_aliases(owner, name)`` is the title a surface
    stores a named session under), past-session recall, and the store's ``indexer`` to nudge
    after each turn (the caller owns it)."""
    from refold.references import local_expander
    from refold.runtime.cost import MeteredClient
    from refold.runtime.engine import Engine

    cost = cost_book(settings, store)
    # the reviewer's calls are charged to the session whose turn started the review
    reviewer_client = MeteredClient(setup.client, cost, what="memory review") \
        if setup.client is not None else None
    memory = tenant_memory(settings, store, owner, reviewer_client)
    skills = tenant_skills(settings, store, owner)
    review = None
    if settings.skills_creation_nudge_interval > 0:
        from refold.skills.review import SkillReviewer

        # a review's writes wait for a person (stage) unless writes are blocked altogether
        mode = "block" if settings.memory_approval == "block" else "stage"
        review = SkillReviewer(tenant_skills(settings, store, owner, mode=mode),
                               interval=settings.skills_creation_nudge_interval)
    aliases = (lambda name: session_aliases(owner, name)) if session_aliases else None
    references = local_expander(store=store, owner=owner, cwd=refs_root,
                                spill_dir=settings.home / "spill", deny_roots=[settings.home],
                                aliases=aliases)
    return Engine(store, model=settings.model, context_length=settings.context_length,
                  owner=owner, memory=memory, chat_client=setup.client,
                  summarizer=setup.summarizer, policy=compaction_policy(settings),
                  references=references, skills=skills, skill_review=review, cost=cost,
                  recall=archive_recall(settings), indexer=indexer)


def cost_book(settings: Settings, store: Store | None) -> CostBook:
    """Prices (the shipped table + ``pricing`` overrides) and the per-session budget."""
    from refold.pricing import parse_overrides
    from refold.runtime.cost import Budget, CostBook

    budget = None if settings.session_budget_usd is None else Budget(
        settings.session_budget_usd, settings.budget_action)
    return CostBook(store, overrides=parse_overrides(settings.pricing), budget=budget)


class EngineFactory:
    """Engines per tenant over one store, sharing one summarizer setup (closed by ``close``)."""

    def __init__(self, settings: Settings, store: Store, *,
                 session_aliases: Callable[[str, str], str] | None = None) -> None:
        self.settings = settings
        self.store = store
        self.setup = summarizer_setup(settings)
        self.session_aliases = session_aliases
        self.indexer = start_indexer(settings, store)

    def __call__(self, owner: str) -> Engine:
        # a remote client's @file/@folder/@diff/@git read only serve --allow-local-refs DIR
        return build_engine(self.settings, self.store, self.setup, owner=owner,
                            refs_root=self.settings.allow_local_refs,
                            session_aliases=self.session_aliases, indexer=self.indexer)

    def close(self) -> None:
        if self.indexer is not None:
            self.indexer.close()
        self.setup.close()


__all__ = ["EngineFactory", "SummarizerSetup", "archive_recall", "build_engine",
           "compaction_policy", "cost_book", "open_configured_store", "start_indexer",
           "summarizer_setup", "tenant_memory", "tenant_memory_dir"]
