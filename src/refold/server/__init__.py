"""``refold serve``: an OpenAI-compatible proxy that gives any agent persistence, compaction and memory.

Only this package imports starlette and uvicorn (in ``app``, ``completions`` and the CLI's
``serve``). ``create_app`` builds the ASGI app; it is imported lazily so ``refold.server.tenancy``
stays usable without the web framework.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from refold.server.app import create_app


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from refold.server.app import create_app

        return create_app
    raise AttributeError(name)


__all__ = ["create_app"]
