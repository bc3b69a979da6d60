"""The floor under ``refold serve``'s CPU per request: the same server stack, nothing else.

A pure ASGI app run by uvicorn exactly as ``refold serve`` runs it (httptools, the same event
loop) that forwards each ``POST /v1/chat/completions`` body unread to the upstream through
refold's own HTTP/1.1 client and streams the reply back unread: no JSON, no validation, no
ledger. ``bench/bench_proxy.py --variants new,floor`` runs it beside the real proxy, so what
refold itself costs per request is the difference.

    python bench/proxy_floor.py UPSTREAM_BASE_URL   # prints "floor: http://127.0.0.1:PORT/v1"
"""

from __future__ import annotations

import sys
from typing import Any

import uvicorn

from refold.cli.serve import bind_socket
from refold.server.h1 import H1Client


async def read_request(scope: dict[str, Any], receive: Any, send: Any) -> tuple[str, bytes] | None:
    """The request's path (without /v1) and body; None when it was answered here (a GET: the
    bench's readiness probe lists no models)."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    if scope["method"] == "GET":
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": b'{"object":"list","data":[]}'})
        return None
    return scope["path"].removeprefix("/v1"), body


def make_app(upstream: str) -> Any:
    client = H1Client(upstream)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        request = await read_request(scope, receive, send)
        if request is None:
            return
        path, body = request
        reply = await client.request("POST", path, {"Content-Type": "application/json"}, body)
        await send({"type": "http.response.start", "status": reply.status_code,
                    "headers": [(b"content-type", reply.headers.get(
                        "content-type", "application/json").encode())]})
        async for chunk in reply.chunks():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    return app


def main() -> None:
    upstream = sys.argv[1]
    # refold serve's own socket: created as TCP, so asyncio sets TCP_NODELAY on what it accepts
    # (a bare socket.socket() has proto 0, and without uvloop every reply then waited ~40 ms
    # for the client's delayed ACK)
    sock = bind_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    print(f"floor: http://127.0.0.1:{port}/v1", flush=True)
    config = uvicorn.Config(make_app(upstream), http="httptools", log_level="warning",
                            access_log=False, lifespan="off")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
