"""The ASGI app: routes, authentication, body limits, and the one place errors become responses.

``create_app(settings, store=..., upstream_transport=...)`` returns a Starlette app serving

    POST /v1/chat/completions        the proxied turn (JSON or SSE), see ``completions``
    GET  /v1/models                  the upstream's model list (the configured model if it has none)
    GET  /v1/refold/sessions         the caller's sessions          (?limit=)
    GET  /v1/refold/sessions/{ref}   one session with its messages  (?limit=&inactive=1)
    GET  /v1/refold/search?q=        search the caller's sessions (?limit=&mode=&session=&role=
                                     &source=&since=&until=&sort=&window=&all=)
    GET  /v1/refold/memory           the caller's memory entries

Every error, whatever its source, leaves as ``{"error": {"message", "type", "code"}}``, but
under ``/v1/messages`` in Anthropic's shape (``messages_api``). Every endpoint reads its body
through ``ProxyApp.body_of`` (the size limit, the body timeout, the JSON depth limit).
Shutdown drains: the lifespan waits for turns in flight (their records) before closing the
engines (which join their background work) and the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio.to_thread
import httpx
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from refold.assembly import EngineFactory as SettingsEngines
from refold.assembly import open_configured_store
from refold.config import Settings
from refold.errors import InvalidInput, RefoldError, UpstreamError
from refold.server import messages_api, reads, responses_api
from refold.server.auth import AuthError, KeyRing, Tenant
from refold.server.completions import Drain, Proxy, chat_completions, parse_json
from refold.server.edges import (
    RequestIdMiddleware,
    RequestTimeout,
    check_depth,
    current_request_id,
    too_deep,
)
from refold.server.sessions import EngineFactory, SessionPool
from refold.server.upstream import Upstream
from refold.server.wire import check_sendable, error_body, error_headers, status_for
from refold.store import Store

log = logging.getLogger(__name__)

DRAIN_SECONDS = 30.0
Handler = Callable[[Request, Tenant], Awaitable[Response]]


class UnsupportedEncoding(Exception):
    """A request body in a Content-Encoding other than gzip or deflate (``app`` answers 415)."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(f"{message}; {hint}")


class BodyTooLarge(Exception):
    def __init__(self, size: int | None, limit: int) -> None:
        super().__init__(f"request body is larger than {limit} bytes")
        self.size = size
        self.limit = limit


def _upstream(settings: Settings, transport: httpx.AsyncBaseTransport | None) -> Any:
    """The upstream client for ``settings.upstream_format`` (openai | anthropic)."""
    kind = getattr(settings, "upstream_format", "openai")
    if kind == "anthropic":
        from refold.server.anthropic_upstream import AnthropicUpstream
        return AnthropicUpstream(str(settings.upstream), settings.upstream_api_key,
                                 transport=transport)
    if kind != "openai":
        raise InvalidInput(f"upstream_format must be openai or anthropic, got {kind!r}")
    return Upstream(str(settings.upstream), settings.upstream_api_key, transport=transport)


def _error(err: RefoldError) -> JSONResponse:
    status, body = status_for(err)
    return JSONResponse(body, status_code=status, headers=error_headers(err))


async def read_body(request: Request, limit: int, timeout: float | None = None) -> bytes:
    """The whole body, at most ``limit`` bytes, arriving within ``timeout`` seconds."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(int(declared), limit)
    chunks: list[bytes] = []
    size = 0
    try:
        # asyncio's own timeout: anyio's cancel scope cost ~25 Python calls a request
        async with asyncio.timeout(timeout):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise BodyTooLarge(None, limit)
                chunks.append(chunk)
    except TimeoutError:
        raise RequestTimeout(timeout or 0.0) from None
    raw = b"".join(chunks)
    coding = request.headers.get("content-encoding", "identity").strip().lower()
    return raw if coding in ("", "identity") else _decoded_body(raw, coding, limit)


def _decoded_body(raw: bytes, coding: str, limit: int) -> bytes:
    """A gzip- or deflate-encoded body decoded, at most ``limit`` bytes of it (a small body
    that inflates past the limit is refused as a large one would be); any other encoding is
    named in a 415."""
    import zlib

    if coding not in ("gzip", "x-gzip", "deflate"):
        raise UnsupportedEncoding(f"Content-Encoding {coding!r} is not supported",
                                  hint="send the body as it is, or gzip- or deflate-encoded")
    inflate = zlib.decompressobj(wbits=47)  # gzip or zlib, told by the header
    try:
        out = inflate.decompress(raw, limit + 1)
    except zlib.error as exc:
        raise InvalidInput(f"the request body is not valid {coding} data: {exc}") from None
    if len(out) > limit or inflate.unconsumed_tail:
        raise BodyTooLarge(None, limit)
    return out


async def parse_body(raw: bytes, max_depth: int) -> Any:
    """The body as JSON nested at most ``max_depth`` deep (else a 400, never a 500)."""
    try:
        body = await parse_json(raw)
    except RecursionError as exc:
        raise too_deep(max_depth) from exc
    check_depth(raw, body, max_depth)
    return body


SWEEP_SESSIONS = 200  # the sessions started last that each idle-memory sweep looks at


class ProxyApp:
    """The state behind the routes; ``build()`` returns the Starlette app."""

    def __init__(self, settings: Settings, *, store: Store | None,
                 upstream_transport: httpx.AsyncBaseTransport | None,
                 engine_factory: EngineFactory | None, capacity: int | None) -> None:
        if not settings.upstream:
            raise InvalidInput("no upstream configured",
                               hint="pass --upstream URL or set REFOLD_UPSTREAM")
        if not settings.upstream.startswith(("http://", "https://")):
            raise InvalidInput(f"the upstream must be an http(s) URL, got {settings.upstream!r}",
                               hint="e.g. http://127.0.0.1:8000/v1")
        if settings.serve_sqlite_synchronous.upper() not in ("FULL", "NORMAL"):
            raise InvalidInput("serve_sqlite_synchronous must be FULL or NORMAL, got "
                               f"{settings.serve_sqlite_synchronous!r}")
        self.settings = settings
        self.keys = KeyRing(settings.api_keys)
        self._own_store = store is None
        self.store: Store | None = store
        self._engine_factory = engine_factory
        self.upstream = _upstream(settings, upstream_transport)
        self.capacity = capacity if capacity is not None else settings.serve_session_cache
        self.proxy: Proxy | None = None
        self._engines: SettingsEngines | None = None  # built from settings, closed at shutdown

    # -- lifecycle -----------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        from refold.tokens.counter import set_cache_entries

        set_cache_entries(self.settings.token_cache_entries)  # bounded under any load
        if self.store is None:
            self.store = await anyio.to_thread.run_sync(self._open_store)
        factory: EngineFactory
        if self._engine_factory is None:
            # titles are unique per owner: a tenant's "@session:notes" is its session "notes"
            self._engines = SettingsEngines(self.settings, self.store)
            factory = self._engines
        else:
            factory = self._engine_factory
        pool = SessionPool(factory, capacity=self.capacity)
        # light mode needs a store that never fsyncs on commit (SQLite WAL, NORMAL: serve's
        # default); with FULL or PostgreSQL every store call may wait, so all go to threads
        light = bool(getattr(self.store, "commits_are_quick", False))
        self.proxy = Proxy(pool=pool, upstream=self.upstream, default_model=self.settings.model,
                           drain=Drain(), light=light)
        minutes = self.settings.memory_flush_idle_minutes
        sweeper = (asyncio.create_task(self._sweep_idle(pool, minutes * 60.0))
                   if minutes > 0 and self.settings.memory_enabled else None)
        warm = asyncio.create_task(self._warm(pool))
        try:
            yield
        finally:
            for task in (sweeper, warm):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            await self.shutdown()

    async def _warm(self, pool: SessionPool) -> None:
        """Build, while the server waits for its first request, what that request would build:
        the open proxy's engine (the local owner's), or with client keys the model's tokenizer
        that every tenant's engine shares. Without this the first request of a fresh serve took
        ~0.7 s (the tokenizer's vocabulary alone ~0.45 s). A request arriving meanwhile waits
        for the same build, never a second one."""
        try:
            if self.keys.open:
                await pool.engine("")
            else:
                from refold.tokens.models import get_counter

                await anyio.to_thread.run_sync(get_counter, self.settings.model)
        except Exception as exc:  # a warm-up only: the first request builds it and reports
            log.debug("warm-up failed: %s", exc)

    async def _sweep_idle(self, pool: SessionPool, idle_seconds: float) -> None:
        """Flush memory for sessions idle ``idle_seconds`` (a serve process that died before
        their end, or a client that just stopped), every ``idle_seconds / 2`` (at most 5 min),
        each tenant's with its own engine (its memory)."""
        interval = min(max(idle_seconds / 2, 0.2), 300.0)
        store = self.store
        assert store is not None
        while True:
            await asyncio.sleep(interval)
            try:
                sessions = await anyio.to_thread.run_sync(
                    lambda: store.list_sessions(limit=SWEEP_SESSIONS))
                for owner in sorted({s.owner for s in sessions}):
                    engine = await pool.engine(owner)
                    flushed = await anyio.to_thread.run_sync(
                        functools.partial(engine.flush_idle_sessions, idle_seconds,
                                          limit=SWEEP_SESSIONS))
                    if flushed:
                        log.info("memory flushed for %d idle session(s)", len(flushed))
            except Exception as exc:  # upkeep: never takes the server down, tries again later
                log.warning("idle memory sweep failed: %s", exc.__class__.__name__)

    def _open_store(self) -> Store:
        return open_configured_store(
            self.settings, sqlite_synchronous=self.settings.serve_sqlite_synchronous)

    def open_store(self) -> None:
        """Open the configured store now (the lifespan then uses it, and closes it at
        shutdown), so a database that cannot be opened fails before serving starts:
        ``refold serve`` says so in one line instead of uvicorn's startup traceback."""
        if self.store is None:
            self.store = self._open_store()

    async def shutdown(self) -> None:
        proxy = self.proxy
        if proxy is not None:
            if not await proxy.drain.wait(DRAIN_SECONDS):
                log.error("%d turn(s) still in flight at shutdown", proxy.drain.active)
            log.info("%s", proxy.summary())
            await anyio.to_thread.run_sync(proxy.pool.close)
        await self.upstream.aclose()
        if self._engines is not None:
            self._engines.close()
        if self._own_store and self.store is not None:
            await anyio.to_thread.run_sync(self.store.close)

    # -- routing -------------------------------------------------------------------------------
    def endpoint(self, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def run(request: Request) -> Response:
            try:
                tenant = self.keys.authenticate(request.headers)
                return await handler(request, tenant)
            except AuthError as exc:
                return JSONResponse(error_body(str(exc), "invalid_request_error",
                                               "invalid_api_key"), status_code=401)
            except RequestTimeout as exc:
                log.info("request %s: %s", current_request_id.get(), exc)
                return JSONResponse(error_body(str(exc), "invalid_request_error",
                                               "request_timeout"), status_code=408,
                                    headers={"connection": "close"})
            except UnsupportedEncoding as exc:
                return JSONResponse(error_body(str(exc), "invalid_request_error",
                                               "unsupported_encoding"), status_code=415)
            except BodyTooLarge as exc:
                return JSONResponse(error_body(
                    f"{exc}; raise max_body_bytes (REFOLD_MAX_BODY_BYTES) to allow it",
                    "invalid_request_error", "request_too_large"), status_code=413)
            except UpstreamError as exc:
                log.warning("request %s: upstream failure: %s", current_request_id.get(), exc)
                return _error(exc)
            except RefoldError as exc:
                return _error(exc)

        return run

    def running_proxy(self) -> Proxy:
        return self._proxy()

    async def body_of(self, request: Request) -> tuple[Any, int]:
        """The request's JSON body and its size in bytes: every endpoint's one reader, with the
        same edges (``max_body_bytes``, ``body_timeout``, ``max_json_depth``); each endpoint
        renders the errors in its provider's shape."""
        raw = await read_body(request, self.settings.max_body_bytes, self.settings.body_timeout)
        return await parse_body(raw, self.settings.max_json_depth), len(raw)

    def _proxy(self) -> Proxy:
        if self.proxy is None:
            raise RefoldError("the server is not started (lifespan did not run)")
        return self.proxy

    async def completions(self, request: Request, tenant: Tenant) -> Response:
        body, size = await self.body_of(request)
        if isinstance(body, dict) and isinstance(body.get("messages"), list):
            check_sendable(body["messages"])
        return await chat_completions(self._proxy(), tenant, request.headers, body, size,
                                      receive=request.receive)

    async def models(self, request: Request, tenant: Tenant) -> Response:
        try:
            data = await self.upstream.models(tenant.bearer)
        except UpstreamError as exc:
            if exc.kind not in ("bad_request", "bad_response"):
                raise
            data = {"object": "list", "data": []}  # an upstream without /models
        raw = data.get("data")
        listed: list[Any] = raw if isinstance(raw, list) else []
        if not any(isinstance(m, dict) and m.get("id") == self.settings.model for m in listed):
            listed = [*listed, {"id": self.settings.model, "object": "model", "created": 0,
                                "owned_by": "refold"}]
        return JSONResponse(dict(data, object="list", data=listed))

    async def sessions(self, request: Request, tenant: Tenant) -> Response:
        limit = reads.parse_limit(request.query_params.get("limit"), 50)
        return JSONResponse(await reads.list_sessions(self._store(), tenant.owner, limit))

    async def session(self, request: Request, tenant: Tenant) -> Response:
        params = request.query_params
        limit = reads.parse_limit(params.get("limit"), 0) if params.get("limit") else None
        inactive = params.get("inactive", "") in ("1", "true", "yes")
        return JSONResponse(await reads.get_session(
            self._store(), tenant.owner, request.path_params["ref"], limit, inactive))

    async def search(self, request: Request, tenant: Tenant) -> Response:
        limit = reads.parse_limit(request.query_params.get("limit"), 20)
        text = request.query_params.get("q", "")
        mode = request.query_params.get("mode") or None
        return JSONResponse(await reads.search(self._store(), tenant.owner, text, limit, mode,
                                               request.query_params))

    async def memory(self, request: Request, tenant: Tenant) -> Response:
        return JSONResponse(await reads.memory(self._proxy().pool, tenant.owner))

    def _store(self) -> Store:
        if self.store is None:
            raise RefoldError("the server is not started (lifespan did not run)")
        return self.store

    def build(self) -> Starlette:
        completions = Route(CHAT_PATH, self.endpoint(self.completions), methods=["POST"])
        routes = [
            completions,
            Route("/v1/models", self.endpoint(self.models), methods=["GET"]),
            Route("/v1/refold/sessions", self.endpoint(self.sessions), methods=["GET"]),
            Route("/v1/refold/sessions/{ref:path}", self.endpoint(self.session),
                  methods=["GET"]),
            Route("/v1/refold/search", self.endpoint(self.search), methods=["GET"]),
            Route("/v1/refold/memory", self.endpoint(self.memory), methods=["GET"]),
            *messages_api.routes(self),
            *responses_api.routes(self),
        ]
        handlers: dict[Any, Any] = {HTTPException: _http_error, Exception: _crash}
        return _Served(routes=routes, lifespan=self.lifespan, exception_handlers=handlers,
                       middleware=[Middleware(HotRoute, route=completions)])


class _Served(Starlette):
    """The app with ``RequestIdMiddleware`` outside Starlette's error middleware: a request's
    id is set before anything runs, and an error the handler answered (a 500) ends there
    instead of reaching the server, which would close the client's keep-alive connection."""

    def build_middleware_stack(self) -> Any:
        return RequestIdMiddleware(super().build_middleware_stack())

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        if len(path) > 1 and path.endswith("/") and scope["type"] == "http":
            # "/v1/chat/completions/": the route, not a 307 redirect (which an SDK does not
            # follow for a POST, so the call failed)
            scope = dict(scope, path=path.rstrip("/") or "/")
        await super().__call__(scope, receive, send)


CHAT_PATH = "/v1/chat/completions"


class HotRoute:
    """``POST /v1/chat/completions`` straight to its endpoint: what Starlette's exception
    middleware, router, route and ``request_response`` would do for it, in one layer (they
    cost ~50 Python calls a turn, a fifth of them on every send). It sits inside the request-id
    middleware and Starlette's server-error middleware, which stay as they were; any other
    request (and a request under a ``root_path``) goes through Starlette's stack.

    Same as Starlette there: the scope gets ``router``, ``route``, ``endpoint`` and
    ``path_params``; an ``HTTPException`` from the endpoint is answered by ``_http_error``;
    anything else propagates to the server-error middleware. (Starlette would also catch an
    ``HTTPException`` raised while a response is sent; none of this endpoint's responses
    raises one.)"""

    def __init__(self, app: Any, route: Route) -> None:
        self.app = app
        self.route = route
        self.endpoint = route.endpoint

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != CHAT_PATH \
                or scope["method"] != "POST" or scope.get("root_path"):
            await self.app(scope, receive, send)
            return
        if "router" not in scope:
            scope["router"] = scope["app"].router
        scope["route"] = self.route
        scope["endpoint"] = self.endpoint
        scope["path_params"] = {}
        request = Request(scope, receive, send)
        try:
            response = await self.endpoint(request)
        except HTTPException as exc:
            response = await _http_error(request, exc)
        await response(scope, receive, send)


def _shaped(request: Request, status: int, body: Any,
            headers: dict[str, str] | None = None) -> JSONResponse:
    """An error answered outside the endpoints (routing, a crash) in the shape of the API the
    path belongs to: Anthropic's under ``/v1/messages``, OpenAI's elsewhere."""
    if messages_api.is_messages_path(request.scope.get("path", "")):
        return messages_api.anthropic_json(status, body, headers)
    return JSONResponse(body, status_code=status, headers=headers)


async def _http_error(request: Request, exc: Exception) -> Response:
    status = getattr(exc, "status_code", 500)
    kind = {404: "not_found_error", 405: "invalid_request_error"}.get(status, "server_error")
    message = f"{request.method} {request.url.path}: {getattr(exc, 'detail', '') or status}"
    return _shaped(request, status, error_body(message, kind, str(status)))


async def _crash(request: Request, exc: Exception) -> Response:
    log.exception("request %s: unexpected error serving %s %s", current_request_id.get(),
                  request.method, request.url.path)
    return _shaped(request, 500, error_body(f"internal error in refold: {type(exc).__name__}",
                                            "server_error", "internal_error"),
                   headers={"x-request-id": current_request_id.get()})


def create_app(settings: Settings | None = None, *, store: Store | None = None,
               upstream_transport: httpx.AsyncBaseTransport | None = None,
               engine_factory: EngineFactory | None = None,
               capacity: int | None = None, **fields: Any) -> Starlette:
    """The proxy app. Pass ``settings`` (``upstream`` required), or the fields themselves
    (``create_app(upstream="http://…/v1", home=path, api_keys=[...])``); fields given alongside
    ``settings`` override it. ``store`` is borrowed if given (the caller closes it), else
    ``settings.db_url`` is opened at startup and closed at shutdown. ``capacity``: live session
    runtimes kept (default ``settings.serve_session_cache``). The library reads no
    environment: ``refold serve`` loads settings (toml, REFOLD_* env, flags) and calls this.
    """
    if settings is None:
        settings = Settings(**fields)
    elif fields:
        settings = settings.updated(**fields)
    app = ProxyApp(settings, store=store, upstream_transport=upstream_transport,
                   engine_factory=engine_factory, capacity=capacity)
    starlette = app.build()
    starlette.state.proxy_app = app
    return starlette
