"""A stream still running when the server's graceful shutdown runs out (SIGTERM with a long
reply in flight): the client was cut off mid-body with no event saying why (its SDK raised
"incomplete chunked read") and uvicorn logged a traceback. It now gets an error event, the
reply is not recorded, and nothing is logged as a crash."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import httpx
import pytest
import uvicorn

from refold.cli.serve import bind_socket
from refold.config import Settings
from refold.server import create_app
from refold.server.runner import uvicorn_config
from refold.store.sqlite import SQLiteStore
from refold.testing import ScriptedReply, serve


def test_a_stream_cut_off_by_the_shutdown_ends_with_an_error_event(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = SQLiteStore(str(tmp_path / "refold.db"), synchronous="NORMAL")
    long = ScriptedReply(content="word " * 400, chunk_delay=0.05)  # ~25 s of chunks
    with serve(default=lambda body: long) as upstream:
        app = create_app(Settings(home=tmp_path / "home", upstream=upstream.base_url,
                                  context_length=100_000), store=store)
        sock = bind_socket("127.0.0.1", 0)
        server = uvicorn.Server(uvicorn_config(app, app.state.proxy_app.settings,
                                               graceful_seconds=1))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.01)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1/chat/completions"
        lines: list[str] = []
        caplog.set_level(logging.WARNING)
        with httpx.stream("POST", url, timeout=30, json={
                "model": "m", "stream": True,
                "messages": [{"role": "user", "content": "tell me a long story"}]}) as response:
            for line in response.iter_lines():
                lines.append(line)
                if len(lines) == 4:
                    server.should_exit = True  # SIGTERM: drain, then cancel what still runs
        thread.join(15)
        sock.close()
    events = [line for line in lines if line.startswith("data: ")]
    assert "shutting_down" in events[-1] and "[DONE]" not in events[-1]
    assert not any("Exception in ASGI application" in r.getMessage() for r in caplog.records)
    sessions = store.list_sessions()
    assert [r.role for r in store.get_messages(sessions[0].id)] == ["user"]  # no partial reply
    store.close()
