"""The floor under a *recording* proxy: ``proxy_floor.py`` plus the least a ledger must do.

The same pure ASGI app on uvicorn and refold's HTTP/1.1 client as ``proxy_floor.py``, plus the
work no proxy that keeps a durable ledger of every message can skip, written as plainly and
cheaply as Python allows: the request body is decoded (``json.loads``) and re-encoded (a proxy
that may replace a stretch with a summary must build its own body), the messages not stored yet
are inserted with raw ``sqlite3`` in one commit before the request goes upstream (WAL,
``synchronous=NORMAL``, as ``refold serve``), the streamed reply is split into SSE events and
each decoded to assemble the answer, and the answer is inserted in a second commit before the
final ``[DONE]``. Nothing else: no identity hashes, no validation, no sessions table, no
compaction, no memory, no usage accounting. A conversation is known by its first two messages
(an in-memory dict), and a re-sent history is assumed to extend what was stored.

``bench/bench_proxy.py --variants new,floor,ledger-floor`` runs it beside the real proxy: the
gap between ``floor`` and ``ledger-floor`` is what recording costs at the least in this stack;
the gap between ``ledger-floor`` and ``new`` is refold's own overhead.

    python bench/proxy_ledger_floor.py UPSTREAM_BASE_URL DB_PATH
"""

from __future__ import annotations

import json
import sqlite3
import sys
from typing import Any

import uvicorn
from proxy_floor import read_request  # the same request reading as the floor

from refold.cli.serve import bind_socket
from refold.server.h1 import H1Client


def make_app(upstream: str, db_path: str) -> Any:
    client = H1Client(upstream)
    db = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("CREATE TABLE IF NOT EXISTS messages (conversation INTEGER, seq INTEGER, "
               "role TEXT, body TEXT, PRIMARY KEY (conversation, seq))")
    stored: dict[str, tuple[int, int]] = {}  # opening -> (conversation id, messages stored)

    def insert(conversation: int, first: int, messages: list[dict[str, Any]]) -> None:
        db.execute("BEGIN IMMEDIATE")
        db.executemany("INSERT INTO messages VALUES (?, ?, ?, ?)",
                       [(conversation, first + i, m.get("role"), json.dumps(m))
                        for i, m in enumerate(messages)])
        db.execute("COMMIT")

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        got = await read_request(scope, receive, send)
        if got is None:
            return
        path, body = got
        request = json.loads(body)
        messages = request["messages"]
        opening = json.dumps(messages[:2])
        conversation, count = stored.get(opening, (len(stored) + 1, 0))
        insert(conversation, count, messages[count:])
        stored[opening] = (conversation, len(messages))
        reply = await client.request("POST", path, {"Content-Type": "application/json"},
                                     json.dumps(request).encode())
        await send({"type": "http.response.start", "status": reply.status_code,
                    "headers": [(b"content-type", reply.headers.get(
                        "content-type", "application/json").encode())]})
        buffer = b""
        parts: list[str] = []
        if not request.get("stream"):  # one JSON body: decode it, store the answer, send it
            whole = b"".join([chunk async for chunk in reply.chunks()])
            answer = json.loads(whole)["choices"][0]["message"]
            insert(conversation, len(messages), [answer])
            stored[opening] = (conversation, len(messages) + 1)
            await send({"type": "http.response.body", "body": whole})
            return
        async for chunk in reply.chunks():
            buffer += chunk
            *events, buffer = buffer.split(b"\n\n")
            for event in events:
                data = event.removeprefix(b"data: ")
                if data == b"[DONE]":
                    insert(conversation, len(messages),
                           [{"role": "assistant", "content": "".join(parts)}])
                    stored[opening] = (conversation, len(messages) + 1)
                    continue
                for choice in json.loads(data).get("choices", ()):
                    parts.append(choice.get("delta", {}).get("content") or "")
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    return app


def main() -> None:
    upstream, db_path = sys.argv[1], sys.argv[2]
    # refold serve's own socket: created as TCP, so asyncio sets TCP_NODELAY on what it accepts
    # (a bare socket.socket() has proto 0, and without uvloop every reply then waited ~40 ms
    # for the client's delayed ACK)
    sock = bind_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    print(f"floor: http://127.0.0.1:{port}/v1", flush=True)
    config = uvicorn.Config(make_app(upstream, db_path), http="httptools", log_level="warning",
                            access_log=False, lifespan="off")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
