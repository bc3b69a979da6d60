"""Where a tenant's memory lives: per-key files under the home, or a per-key database profile.

Kept free of web-framework imports so ``refold chat`` (the local tenant) builds its memory the
same way the proxy does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from refold.cli.settings import Settings
from refold.errors import InvalidInput
from refold.store.base import Store


def tenant_memory_dir(settings: Settings, owner: str) -> Path:
    """Where a tenant's MEMORY.md / USER.md live: the local dir, or one per client key."""
    if not owner:
        return settings.memories_dir
    return settings.home / "tenants" / owner / "memories"


def tenant_memory(settings: Settings, store: Store, owner: str, chat_client: Any) -> Any:
    """The tenant's memory: its own files, or its own profile in the database (memory_backend),
    plus the external ``memory_provider`` when one is configured (an instance per tenant).

    The local owner uses ``memory_profile``; a client key's tenant gets a profile of its own, so
    one key's memory never reaches another key's snapshot.
    """
    link = _builtin_memory(settings, store, owner, chat_client)
    if settings.memory_provider:
        from refold.memory.provider import load_provider

        link.manager.add_provider(load_provider(settings.memory_provider))
    return link


def _builtin_memory(settings: Settings, store: Store, owner: str, chat_client: Any) -> Any:
    from refold.runtime.memory_link import MemoryLink

    approval = settings.memory_approval
    # chat_client is the summary endpoint: review asks the summary model it serves
    review_model = settings.summarizer_model or settings.model
    if settings.memory_backend == "db":
        from refold.memory.db import DBMemoryStore

        profile = settings.memory_profile if not owner else f"{settings.memory_profile}:{owner}"
        return MemoryLink.for_store(DBMemoryStore(store, profile), approval=approval,
                                    chat_client=chat_client, model=review_model)
    if settings.memory_backend != "file":
        raise InvalidInput(f"unknown memory_backend {settings.memory_backend!r}",
                           hint="use file or db")
    return MemoryLink.from_dir(tenant_memory_dir(settings, owner), approval=approval,
                               chat_client=chat_client, model=review_model)


__all__ = ["tenant_memory", "tenant_memory_dir"]
