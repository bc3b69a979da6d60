"""Running the app under uvicorn: the one place its server options are chosen.

``refold serve`` and the tests both call ``uvicorn_config`` so the edges they exercise (the
header timeout protocol, keep-alive, graceful shutdown) are the ones users get.
"""

from __future__ import annotations

from typing import Any

from refold.config import Settings
from refold.server.edges import guarded_protocol

GRACEFUL_SECONDS = 30
KEEP_ALIVE_SECONDS = 5


def uvicorn_config(asgi: Any, settings: Settings, *, log_level: str = "warning",
                   graceful_seconds: float = GRACEFUL_SECONDS) -> Any:
    """The ``uvicorn.Config`` serving ``asgi`` with refold's edges."""
    import uvicorn

    return uvicorn.Config(asgi, log_level=log_level, access_log=False, lifespan="on",
                          http=guarded_protocol(settings.header_timeout),
                          timeout_keep_alive=KEEP_ALIVE_SECONDS,
                          timeout_graceful_shutdown=int(graceful_seconds))


__all__ = ["uvicorn_config"]
