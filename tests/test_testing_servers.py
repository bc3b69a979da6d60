"""``refold.testing``'s scripted servers: a client that goes away mid-reply is no error.

A test that cancels a stream (or a proxy that drops an upstream connection) left a
``BrokenPipeError`` traceback on stderr from the server's thread: noise that reads as a failure
in the test run's output."""

from __future__ import annotations

import socket
import time

import pytest

from refold.testing import ScriptedReply, serve
from refold.testing.anthropic_server import AnthropicReply, serve_anthropic


def _leave_mid_stream(port: int, path: str, body: bytes) -> None:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/json\r\nContent-Length: "
                     + str(len(body)).encode() + b"\r\n\r\n" + body)
        sock.recv(200)  # the reply started
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    time.sleep(0.6)  # the server writes its next chunks into the reset connection


def test_a_client_leaving_mid_stream_prints_no_traceback(
        capfd: pytest.CaptureFixture[str]) -> None:
    reply = ScriptedReply(content="a streamed reply of several words " * 8, chunk_delay=0.02)
    with serve([reply]) as upstream:
        _leave_mid_stream(upstream.port, "/v1/chat/completions",
                          b'{"model": "m", "stream": true, "messages": '
                          b'[{"role": "user", "content": "hi"}]}')
    blocks = [{"type": "text", "text": "a streamed reply of several words " * 8}]
    with serve_anthropic([AnthropicReply(content=blocks)]) as upstream:
        port = int(upstream.base_url.rsplit(":", 1)[1].split("/")[0])
        _leave_mid_stream(port, "/v1/messages",
                          b'{"model": "m", "max_tokens": 9, "stream": true, "messages": '
                          b'[{"role": "user", "content": "hi"}]}')
    err = capfd.readouterr().err
    assert "Traceback" not in err and "BrokenPipe" not in err and "ConnectionReset" not in err
