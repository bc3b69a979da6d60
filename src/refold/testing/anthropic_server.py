"""A scripted Anthropic Messages server on a real local socket (``POST /v1/messages``, JSON
and SSE), for testing ``refold serve --upstream-format anthropic`` with real clients.

A reply is an ``AnthropicReply`` (or a string: one text block). Streams follow the live API's
event order: ``message_start``, ``ping``, per block ``content_block_start`` / deltas /
``content_block_stop``, ``message_delta`` (stop reason, usage), ``message_stop``. Every request
body and its headers are kept for assertions.
"""

from __future__ import annotations

import json
import sys
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from refold._records import dataclass, field


@dataclass
class AnthropicReply:
    content: list[dict[str, Any]] = field(default_factory=lambda: [{"type": "text",
                                                                    "text": "ok"}])
    stop_reason: str | None = None  # default: tool_use if a tool_use block, else end_turn
    usage: dict[str, int] = field(default_factory=lambda: {
        "input_tokens": 12, "output_tokens": 3, "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 40})
    status: int = 200
    error: dict[str, Any] | None = None  # the body of a non-200 answer
    error_event_after: int | None = None  # stream: an ``error`` event after this many events
    headers: dict[str, str] | None = None  # extra headers of a non-200 answer (Retry-After…)


@dataclass
class ScriptedAnthropic:
    replies: deque[AnthropicReply | str] = field(default_factory=deque)
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def next_reply(self, body: dict[str, Any], headers: dict[str, str]) -> AnthropicReply:
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            reply = self.replies.popleft() if self.replies else "ok"
        if isinstance(reply, str):
            return AnthropicReply(content=[{"type": "text", "text": reply}])
        return reply


def _message(body: dict[str, Any], reply: AnthropicReply, number: int) -> dict[str, Any]:
    stop = reply.stop_reason or ("tool_use" if any(
        b.get("type") == "tool_use" for b in reply.content) else "end_turn")
    return {"id": f"msg_scripted{number}", "type": "message", "role": "assistant",
            "model": body.get("model", "claude-scripted"), "content": reply.content,
            "stop_reason": stop, "stop_sequence": None, "usage": reply.usage}


def _block_events(index: int, block: dict[str, Any]) -> Iterator[dict[str, Any]]:
    kind = block.get("type")
    start = dict(block)
    deltas: list[dict[str, Any]] = []
    if kind == "text":
        start["text"] = ""
        text = block.get("text", "")
        deltas = [{"type": "text_delta", "text": text[i:i + 16]} for i in range(0, len(text), 16)]
    elif kind == "thinking":
        start.update(thinking="", signature="")
        deltas = [{"type": "thinking_delta", "thinking": block.get("thinking", "")},
                  {"type": "signature_delta", "signature": block.get("signature", "")}]
    elif kind == "tool_use":
        start["input"] = {}
        raw = json.dumps(block.get("input") or {})
        deltas = [{"type": "input_json_delta", "partial_json": raw[i:i + 8]}
                  for i in range(0, len(raw), 8)]
    yield {"type": "content_block_start", "index": index, "content_block": start}
    for delta in deltas:
        yield {"type": "content_block_delta", "index": index, "delta": delta}
    yield {"type": "content_block_stop", "index": index}


def stream_events(message: dict[str, Any]) -> Iterator[dict[str, Any]]:
    usage = message["usage"]
    start = dict(message, content=[], stop_reason=None,
                 usage=dict(usage, output_tokens=1))
    yield {"type": "message_start", "message": start}
    yield {"type": "ping"}
    for index, block in enumerate(message["content"]):
        yield from _block_events(index, block)
    yield {"type": "message_delta", "delta": {"stop_reason": message["stop_reason"],
                                              "stop_sequence": None},
           "usage": {"output_tokens": usage["output_tokens"]}}
    yield {"type": "message_stop"}


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            self._json(200, {"data": [{"type": "model", "id": "claude-scripted",
                                       "display_name": "Claude (scripted)"}],
                             "has_more": False})
        else:
            self._json(404, {"type": "error", "error": {"type": "not_found_error",
                                                        "message": "not found"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if not self.path.rstrip("/").endswith("/messages"):
            self._json(404, {"type": "error", "error": {"type": "not_found_error",
                                                        "message": "not found"}})
            return
        llm = self.server.llm
        reply = llm.next_reply(body, {k.lower(): v for k, v in self.headers.items()})
        if reply.status != 200:
            self._json(reply.status, reply.error or {"type": "error", "error": {
                "type": "api_error", "message": "scripted error"}}, reply.headers)
            return
        message = _message(body, reply, len(llm.requests))
        if not body.get("stream"):
            self._json(200, message)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for n, event in enumerate(stream_events(message)):
            if reply.error_event_after is not None and n == reply.error_event_after:
                event = {"type": "error", "error": {"type": "overloaded_error",
                                                    "message": "Overloaded"}}
                self._chunk(f"event: error\ndata: {json.dumps(event)}\n\n".encode())
                break
            self._chunk(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
        self._chunk(b"")

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    llm: ScriptedAnthropic

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away mid-reply (a test's cancelled stream) is no error: not a
        traceback on stderr; anything else is printed as socketserver does."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class RunningAnthropic:
    """A ``ScriptedAnthropic`` served on 127.0.0.1 (``base_url`` is …/v1)."""

    def __init__(self, llm: ScriptedAnthropic) -> None:
        self.llm = llm
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.llm = llm
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> RunningAnthropic:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve_anthropic(replies: Iterable[AnthropicReply | str] = ()) -> RunningAnthropic:
    return RunningAnthropic(ScriptedAnthropic(replies=deque(replies)))
