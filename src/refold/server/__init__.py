"""``refold serve``: an OpenAI-compatible proxy that gives any agent persistence, compaction and memory.

Only this package imports starlette and uvicorn. ``create_app`` builds the ASGI app;
``refold.cli.serve`` runs it under uvicorn.
"""

from refold.server.app import create_app

__all__ = ["create_app"]
