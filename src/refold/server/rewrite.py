"""A proxied turn's response in another API's shape: the one seam between the turn pipeline
(``server.completions``, chat completions) and the endpoints that translate around it.

``chat_turn`` runs one chat-completions turn exactly as ``POST /v1/chat/completions`` would
(the session lock, storing, compaction, the record before the last byte) and returns its
response; ``rewritten_json`` and ``RewrittenStream`` re-render that response's body without
touching what the pipeline does: a JSON reply keeps its headers and its after-send work, a
stream keeps its timing (each piece the pipeline sends is translated and sent at once), so
the last piece a client of the other API gets still leaves only after the reply is stored.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Protocol

from starlette.responses import JSONResponse, Response
from starlette.types import Message as AsgiMessage
from starlette.types import Receive, Scope, Send

from refold.llm.sse import DONE, EventSplitter, parse_chunk
from refold.server.auth import Tenant
from refold.server.completions import Proxy, chat_completions
from refold.server.sessions import SESSION_HEADER


class StreamRewriter(Protocol):
    """Renders the pipeline's events; an optional ``async finish() -> bytes`` runs after
    ``done()`` (the reply is stored) and its bytes leave in the same, last write."""

    def chunk(self, chunk: dict[str, Any]) -> bytes: ...  # a chat.completion.chunk
    def error(self, status: int, body: dict[str, Any]) -> bytes: ...  # the pipeline's sse_error
    def done(self) -> bytes: ...  # the pipeline's [DONE]: the reply is stored


async def chat_turn(proxy: Proxy, tenant: Tenant, headers: Mapping[str, str],
                    body: dict[str, Any], raw_size: int = 0,
                    lineage: str | None = None, receive: Receive | None = None) -> Response:
    """One turn through the chat-completions pipeline (errors raise as ``RefoldError``);
    ``lineage``: the session a continuation runs in (see ``chat_completions``); ``receive``:
    the client's, watched for a hang-up while the upstream works."""
    return await chat_completions(proxy, tenant, headers, body, raw_size, lineage, receive)


def session_of(response: Response) -> str | None:
    return response.headers.get(SESSION_HEADER)


def _kept_headers(response: Response) -> dict[str, str]:
    return {k: v for k, v in response.headers.items()
            if k.lower() not in ("content-length", "content-type")}


def reply_json(response: Response) -> dict[str, Any]:
    """The JSON object of a non-streamed turn's response."""
    data = json.loads(bytes(response.body))
    return data if isinstance(data, dict) else {}


def rewritten_json(response: Response, data: Any, status: int | None = None) -> JSONResponse:
    """``data`` as the body (``status``, else the response's), with the turn's headers and its
    after-send work."""
    return JSONResponse(data, status_code=status or response.status_code,
                        headers=_kept_headers(response), background=response.background)


class RewrittenStream(Response):
    """The pipeline's SSE stream, each piece re-rendered by a ``StreamRewriter``."""

    def __init__(self, inner: Response, rewriter: StreamRewriter) -> None:
        # no super().__init__: it would declare a Content-Length for an empty body
        self.inner = inner
        self.rewriter = rewriter
        self.status_code = inner.status_code
        self.background = None
        self.raw_headers = inner.raw_headers
        self._splitter = EventSplitter()
        self._done = False
        self._finished = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def translated(message: AsgiMessage) -> None:
            if message["type"] == "http.response.body":
                body = self._translate(message.get("body", b""))
                finish = getattr(self.rewriter, "finish", None)
                if self._done and finish is not None and not self._finished:
                    self._finished = True
                    body += await finish()
                message = dict(message, body=body)
            await send(message)

        await self.inner(scope, receive, translated)

    def _translate(self, data: bytes) -> bytes:
        out: list[bytes] = []
        for event in self._splitter.feed(data):
            if event.data is None:
                continue
            if event.data == DONE:
                self._done = True
                out.append(self.rewriter.done())
                continue
            value = parse_chunk(event.data)
            if value is None:
                continue
            if "error" in value and "choices" not in value:
                detail = value.get("error") or {}
                status = int(detail.get("status") or 500) if isinstance(detail, dict) else 500
                out.append(self.rewriter.error(status, value))
            else:
                out.append(self.rewriter.chunk(value))
        return b"".join(out)

