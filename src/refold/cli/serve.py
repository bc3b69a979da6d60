"""``refold serve``: run the OpenAI-compatible proxy (``refold.server``) under uvicorn.

The listening socket is bound here, before uvicorn starts, so a taken port is one clear error
line instead of a log dump. SIGINT/SIGTERM shut down gracefully: uvicorn stops accepting, lets
in-flight turns finish (their replies are recorded), then the app closes engines and the store.
With ``--workers N`` (N > 1) the socket is shared by N forked worker processes under a
supervisor (``refold.server.workers``): one port, any worker serves any turn.
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import sys
from collections.abc import Iterator
from typing import Any

import click

from refold.cli.app import AppContext, pass_app, require_extra
from refold.config import Settings
from refold.errors import InvalidInput
from refold.store.urls import redact_url


def _client_keys(env_names: tuple[str, ...]) -> list[str]:
    keys: list[str] = []
    for name in env_names:
        value = os.environ.get(name, "").strip()
        if not value:
            raise InvalidInput(f"--api-key-env {name}: the variable is not set or empty")
        keys.extend(k.strip() for k in value.split(",") if k.strip())
    return keys


def _quiet_server(config: Any) -> Any:
    """A uvicorn server for ``config`` that ends quietly once a SIGINT or SIGTERM stopped it."""
    import contextlib

    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server, ending quietly once a SIGINT or SIGTERM stopped it.

        After its graceful shutdown (the turns in flight finished and recorded) uvicorn raises
        the signal again: Ctrl-C printed "aborted" and exited with status 130 (SIGTERM: killed,
        143) for a server that stopped as asked; ``--workers`` exits 0."""

        stopped_by = ""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            with super().capture_signals():
                yield
                captured = getattr(self, "_captured_signals", None)
                if captured:
                    self.stopped_by = signal.Signals(captured[0]).name + (
                        " twice (the turns in flight were not waited for)"
                        if self.force_exit else "")
                    captured.clear()  # nothing left for uvicorn to raise again

    return Server(config)


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening socket on (host, port), or InvalidInput saying why not."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto must say TCP: asyncio only sets TCP_NODELAY on accepted sockets whose proto is
    # IPPROTO_TCP, and without it every small SSE chunk waits ~40 ms for a delayed ACK
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise InvalidInput(f"port {port} on {host} is already in use",
                               hint="stop the other server or pick another --port") from exc
        raise InvalidInput(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def limit_malloc_arenas(arenas: int) -> bool:
    """Cap glibc's malloc arenas for this process and the workers it forks (``mallopt``,
    before the server's threads start). No-op (False) with 0, off glibc, or when
    ``MALLOC_ARENA_MAX`` is set in the environment (the user's choice wins)."""
    if arenas <= 0 or os.environ.get("MALLOC_ARENA_MAX") or not sys.platform.startswith("linux"):
        return False
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(M_ARENA_MAX, int(arenas)))
    except (OSError, AttributeError):  # not glibc (musl has no mallopt): nothing to cap
        return False


M_ARENA_MAX = -8  # glibc's mallopt parameter number


def _banner(settings: Settings, sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    auth = f"{len(settings.api_keys)} client key(s)" if settings.api_keys else "no client keys"
    workers = f", {settings.serve_workers} workers" if settings.serve_workers > 1 else ""
    return (f"refold serve: http://{host}:{port}/v1 -> {settings.upstream} "
            f"(model {settings.model}, {auth}, db {redact_url(settings.db_url)}{workers})")


def _probe(upstream: str, api_key: str | None) -> str | None:
    """Why the upstream looks unusable right now, or None (serving starts either way)."""
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        httpx.get(upstream.rstrip("/") + "/models", headers=headers, timeout=3)
    except httpx.HTTPError as exc:
        return (f"the upstream {upstream} does not answer ({type(exc).__name__}); "
                "requests get a 502 until it does")
    return None


@click.command("serve")
@click.option("--upstream", help="OpenAI-compatible base URL to forward to, e.g. "
                                 "http://127.0.0.1:8000/v1 (or $REFOLD_UPSTREAM).")
@click.option("--upstream-format", type=click.Choice(["openai", "anthropic"]),
              help="What the upstream speaks: openai (chat completions, default) or anthropic "
                   "(the Messages API; base URL like https://api.anthropic.com/v1).")
@click.option("--host", help="Address to listen on (default 127.0.0.1).")
@click.option("--port", type=int, help="Port to listen on (default 8765; 0 picks a free one).")
@click.option("--model", help="Model used when a request names none, and for token counting.")
@click.option("--context-length", type=int, help="The model's context window in tokens.")
@click.option("--api-key-env", "api_key_envs", multiple=True, metavar="VAR",
              help="Accept the client key(s) in env variable VAR (repeatable; comma-separated "
                   "keys allowed). $REFOLD_API_KEYS works too. No keys: no auth.")
@click.option("--upstream-api-key-env", metavar="VAR",
              help="Read the upstream's API key from env variable VAR "
                   "(default $REFOLD_UPSTREAM_API_KEY).")
@click.option("--max-body-bytes", type=int, help="Largest accepted request body.")
@click.option("--allow-local-refs", type=click.Path(file_okay=False, exists=True), metavar="DIR",
              help="Let @file/@folder/@diff/@staged/@git in requests read DIR (default: off; "
                   "@session always works, within the caller's own sessions).")
@click.option("--workers", type=int,
              help="Worker processes accepting on the one port (default 1; or "
                   "$REFOLD_SERVE_WORKERS). Any worker serves any turn: the database is shared.")
@click.option("--log-level", default="warning", show_default=True,
              type=click.Choice(["critical", "error", "warning", "info", "debug"]),
              help="uvicorn's log level (stderr); `refold -v serve` logs more of refold's own.")
@pass_app
def serve_cmd(app: AppContext, upstream: str | None, upstream_format: str | None,
              host: str | None, port: int | None,
              model: str | None, context_length: int | None, api_key_envs: tuple[str, ...],
              upstream_api_key_env: str | None, max_body_bytes: int | None,
              allow_local_refs: str | None, workers: int | None, log_level: str) -> None:
    """Serve the chat completions, Messages and Responses APIs with sessions, compaction and memory."""
    require_extra("serve", "server", "starlette", "uvicorn")
    import uvicorn

    from refold.assembly import open_configured_store
    from refold.server import create_app
    from refold.server.runner import GRACEFUL_SECONDS, tune_gc, uvicorn_config
    from refold.server.workers import Supervisor, check_workers

    app.flags.update(upstream=upstream, upstream_format=upstream_format, host=host, port=port,
                     model=model, context_length=context_length, max_body_bytes=max_body_bytes,
                     allow_local_refs=allow_local_refs, serve_workers=workers)
    settings = app.settings
    if not settings.upstream:
        raise InvalidInput("no upstream to forward to",
                           hint="pass --upstream URL or set REFOLD_UPSTREAM")
    extra_keys = _client_keys(api_key_envs)
    updates: dict[str, object] = {"api_keys": [*settings.api_keys, *extra_keys]}
    if upstream_api_key_env:
        updates["upstream_api_key"] = os.environ.get(upstream_api_key_env) or None
    settings = settings.updated(**updates)
    limit_malloc_arenas(settings.serve_malloc_arenas)  # before any thread of the server
    count = settings.serve_workers
    check_workers(count)
    if settings.memory_enabled and settings.memory_provider:
        # a provider that cannot load would fail every request (a 404 each): said once, now
        from refold.errors import NotFound
        from refold.memory.provider import load_provider

        try:
            load_provider(settings.memory_provider)
        except NotFound as exc:  # refold.toml names it: a setting to fix, as a bad flag is
            raise InvalidInput(exc.message, hint=exc.hint) from exc
    asgi = create_app(settings)  # checks the settings (workers build their own app)
    sock = bind_socket(settings.host, settings.port)
    try:
        # the database opened before the banner: one that cannot be opened is one error line
        # and exit 1 (uvicorn's startup traceback and exit 3 before, under the banner)
        if count == 1:
            asgi.state.proxy_app.open_store()  # the app's own: the lifespan closes it
        else:  # migrate once here, so the workers opening it at once never race a migration
            open_configured_store(
                settings, sqlite_synchronous=settings.serve_sqlite_synchronous).close()
    except BaseException:
        sock.close()
        raise
    click.echo(_banner(settings, sock), err=True)
    warning = _probe(str(settings.upstream), settings.upstream_api_key)
    if warning:
        click.echo(f"warning: {warning}", err=True)
    if count == 1:
        server = _quiet_server(uvicorn_config(asgi, settings, log_level=log_level))
        tune_gc()
        server.run(sockets=[sock])
        if server.stopped_by:  # as the supervisor of --workers says it, and exits 0
            click.echo(f"refold serve: {server.stopped_by}, stopped", err=True)
        return
    del asgi

    def serve_one(listening: socket.socket) -> None:
        config = uvicorn_config(create_app(settings), settings, log_level=log_level)
        tune_gc()
        uvicorn.Server(config).run(sockets=[listening])

    code = Supervisor(count, sock, serve_one, drain_seconds=GRACEFUL_SECONDS).run()
    sys.exit(code)
