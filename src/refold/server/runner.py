"""Running the app under uvicorn: the one place its server options are chosen.

``refold serve`` and the tests both call ``uvicorn_config`` so the edges they exercise (the
header timeout protocol, keep-alive, graceful shutdown) are the ones users get.
"""

from __future__ import annotations

import gc
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


# young collections after this many new container objects (CPython's default: 700). A proxied
# turn makes a few thousand (the re-sent history's dicts, decoded, compared, copied), almost
# all freed by reference counting before any collection sees them: at 700 the collector ran
# several times a turn over the turn's live objects, ~4% of a turn's instructions.
GC_YOUNG_THRESHOLD = 10_000


def tune_gc() -> None:
    """For a server process, before it serves: what is alive now (the imported modules, the
    app) is frozen out of the cyclic collector's passes (``gc.freeze``: it lives as long as the
    process anyway), and young collections run less often (``GC_YOUNG_THRESHOLD``). Garbage
    cycles are still collected, in batches; nothing else changes."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)


__all__ = ["GC_YOUNG_THRESHOLD", "tune_gc", "uvicorn_config"]
