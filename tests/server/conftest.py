"""Fixtures for the proxy: the real app under uvicorn on a free local port, in a thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from refold.cli.serve import bind_socket
from refold.config import Settings
from refold.server import create_app
from refold.server.runner import uvicorn_config
from refold.store import Store
from refold.testing import RunningLLM


@pytest.fixture(params=["NORMAL", "FULL"], ids=["light", "threads"])
def sqlite_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """The proxy's SQLite ledger, both ways the proxy runs a turn's runtime work: NORMAL
    (``refold serve``'s default: small turns on the event loop, "light mode") and FULL (every
    store call in a worker thread)."""
    from refold.store.sqlite import SQLiteStore

    store = SQLiteStore(str(tmp_path / "refold.db"), synchronous=request.param)
    yield store
    store.close()


@dataclass
class Running:
    base_url: str  # …/v1
    server: uvicorn.Server
    app: Any

    @property
    def root(self) -> str:
        return self.base_url.removesuffix("/v1")


@contextmanager
def run_app(app: Any) -> Iterator[Running]:
    sock = bind_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    settings = app.state.proxy_app.settings
    server = uvicorn.Server(uvicorn_config(app, settings, graceful_seconds=10))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the proxy did not start")
        time.sleep(0.01)
    try:
        yield Running(f"http://127.0.0.1:{port}/v1", server, app)
    finally:
        server.should_exit = True
        thread.join(15)
        sock.close()


ProxyFactory = Callable[..., Running]


@contextmanager
def _starter(home: Path, store: Store) -> Iterator[ProxyFactory]:
    stack: list[Any] = []

    def start(upstream: RunningLLM | str, *, capacity: int = 256, **fields: Any) -> Running:
        url = upstream if isinstance(upstream, str) else upstream.base_url
        fields.setdefault("context_length", 100_000)
        settings = Settings(home=home, upstream=url, **fields)
        cm = run_app(create_app(settings, store=store, capacity=capacity))
        running = cm.__enter__()
        stack.append(cm)
        return running

    try:
        yield start
    finally:
        for cm in reversed(stack):
            cm.__exit__(None, None, None)


@pytest.fixture
def start_proxy(tmp_path: Path, sqlite_store: Store) -> Iterator[ProxyFactory]:
    """``start_proxy(upstream, **settings)`` → a running proxy over ``sqlite_store``."""
    with _starter(tmp_path / "home", sqlite_store) as start:
        yield start


@pytest.fixture
def start_pg_proxy(tmp_path: Path, postgres_store: Store) -> Iterator[ProxyFactory]:
    """The same over ``postgres_store`` (a fresh schema)."""
    with _starter(tmp_path / "home", postgres_store) as start:
        yield start


@pytest.fixture
def start_one_proxy(tmp_path: Path) -> Iterator[ProxyFactory]:
    """A proxy over one SQLite store in serve's default mode, for tests of the HTTP edges that
    the two ways of running a turn do not change."""
    from refold.store.sqlite import SQLiteStore

    store = SQLiteStore(str(tmp_path / "refold.db"), synchronous="NORMAL")
    with _starter(tmp_path / "home", store) as start:
        yield start
    store.close()
