"""The lean upstream HTTP/1.1 client (``server.h1``) and ``Upstream`` on top of it, on real sockets.

Most tests run a raw ``asyncio.start_server`` written here, so the bytes on the wire are exactly
what the test says (framing, misbehaviour, stalls, closes); the ``Upstream`` tests also use the
scripted OpenAI-compatible server (``refold.testing.serve``). Every test is a plain function that
runs its coroutine with ``asyncio.run`` (the project has no pytest-asyncio).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from refold.errors import UpstreamError
from refold.llm.failures import classify_http_error
from refold.server import h1
from refold.server.h1 import HIGH_WATER, H1Client, H1Error, lean_client_for
from refold.server.transport import H1Transport
from refold.server.upstream import Upstream, UpstreamStream
from refold.testing import serve
from refold.testing.llm_server import RunningLLM, ScriptedReply

_PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


@pytest.fixture(autouse=True)
def _no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether the lean client applies depends on proxy variables: start from none."""
    for name in _PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


def run_async(fn: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    """Run an async test body in a fresh event loop (with a hang guard)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        asyncio.run(asyncio.wait_for(fn(*args, **kwargs), 10))

    return wrapper


# -- a raw server whose bytes the test writes ----------------------------------------------------

Reader = asyncio.StreamReader
Writer = asyncio.StreamWriter


class RawServer:
    """``handler(server, reader, writer)`` runs for every accepted connection."""

    def __init__(self, handler: Callable[[RawServer, Reader, Writer], Awaitable[None]]) -> None:
        self.handler = handler
        self.accepts = 0
        self.requests: list[tuple[bytes, bytes]] = []  # (head, body) of every request read
        self.eofs = 0  # connections the client closed (counted by ``wait_for_eof``)
        self.port = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _accept(self, reader: Reader, writer: Writer) -> None:
        self.accepts += 1
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self.handler(self, reader, writer)
        except (asyncio.CancelledError, ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._tasks.discard(task)
            writer.close()

    async def read_request(self, reader: Reader) -> tuple[bytes, bytes] | None:
        """One request off the wire (also kept in ``requests``); None when the client closed."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return None
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        body = await reader.readexactly(length)
        self.requests.append((head, body))
        return head, body

    async def wait_for_eof(self, reader: Reader) -> None:
        """Until the client closes its side (anything it still sends is discarded)."""
        while await reader.read(65536):
            pass
        self.eofs += 1

    async def settle(self, eofs: int, timeout: float = 1.0) -> None:
        """Give the loop time until ``eofs`` client closes were seen (or ``timeout`` passed)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.eofs < eofs and loop.time() < deadline:
            await asyncio.sleep(0.005)


@asynccontextmanager
async def raw_server(handler: Callable[[RawServer, Reader, Writer], Awaitable[None]],
                     ) -> AsyncIterator[RawServer]:
    server = RawServer(handler)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def response(body: bytes, *extra: str, version: str = "1.1", status: str = "200 OK") -> bytes:
    head = [f"HTTP/{version} {status}", f"Content-Length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def chunked(*pieces: bytes) -> bytes:
    out = b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in pieces)
    return out + b"0\r\n\r\n"


CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"


def keep_alive(reply: Callable[[int], bytes]) -> Callable[[RawServer, Reader, Writer],
                                                         Awaitable[None]]:
    """A server answering the n-th request on each connection with ``reply(n)`` (from 1)."""

    async def handler(server: RawServer, reader: Reader, writer: Writer) -> None:
        n = 0
        while await server.read_request(reader):
            n += 1
            writer.write(reply(n))
            await writer.drain()

    return handler


async def get(client: H1Client, path: str = "/") -> bytes:
    resp = await client.request("GET", path, {})
    assert resp.status_code == 200
    return await resp.read()


def closed_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = int(sock.getsockname()[1])
    sock.close()
    return port


# -- requests on the wire ------------------------------------------------------------------------

@run_async
async def test_the_request_carries_path_host_length_and_headers() -> None:
    async with raw_server(keep_alive(lambda n: response(b"ok"))) as srv:
        client = H1Client(srv.url + "/v1/")
        resp = await client.request("POST", "/chat/completions",
                                    {"Authorization": "Bearer k", "X-Trace": "7"}, b'{"a": 1}')
        assert await resp.read() == b"ok"
        assert await get(client, "/models") == b"ok"
        await client.aclose()
    (head, body), (get_head, get_body) = srv.requests
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /v1/chat/completions HTTP/1.1"
    assert f"Host: 127.0.0.1:{srv.port}".encode() in lines
    assert b"Content-Length: 8" in lines
    assert b"Accept-Encoding: identity" in lines
    assert b"Authorization: Bearer k" in lines and b"X-Trace: 7" in lines
    assert body == b'{"a": 1}'
    assert get_head.startswith(b"GET /v1/models HTTP/1.1\r\n")
    assert b"Content-Length: 0" in get_head.split(b"\r\n") and get_body == b""


def test_client_parses_its_base_url() -> None:
    client = H1Client("http://[::1]:8080/v1/")
    assert (client.host, client.port, client.base_path) == ("::1", 8080, "/v1")
    assert client.host_header == "[::1]:8080"
    tls = H1Client("https://api.example/v1")
    assert (tls.tls, tls.port, tls.host_header) == (True, 443, "api.example")
    assert H1Client("http://api.example").host_header == "api.example"
    with pytest.raises(ValueError):
        H1Client("ftp://api.example/v1")
    with pytest.raises(ValueError):
        H1Client("http:///v1")


# -- 1. keep-alive -------------------------------------------------------------------------------

@run_async
async def test_sequential_requests_reuse_one_connection() -> None:
    async with raw_server(keep_alive(lambda n: response(f"reply {n}".encode()))) as srv:
        client = H1Client(srv.url)
        bodies = [await get(client) for _ in range(3)]
        assert len(client._idle) == 1
        await client.aclose()
    assert bodies == [b"reply 1", b"reply 2", b"reply 3"]
    assert srv.accepts == 1
    assert len(srv.requests) == 3


@pytest.mark.parametrize("extra,version", [
    (("Connection: close",), "1.1"),
    ((), "1.0"),
])
@run_async
async def test_a_connection_the_server_will_not_keep_is_not_reused(
        extra: tuple[str, ...], version: str) -> None:
    # the server leaves the socket open: only the response's own framing says "not reusable"
    async with raw_server(keep_alive(
            lambda n: response(f"reply {n}".encode(), *extra, version=version))) as srv:
        client = H1Client(srv.url)
        assert await get(client) == b"reply 1"
        assert client._idle == []
        assert await get(client) == b"reply 1"  # a new connection: its first request
        await client.aclose()
    assert srv.accepts == 2
    assert len(srv.requests) == 2


@run_async
async def test_an_http10_keep_alive_response_is_reused() -> None:
    async with raw_server(keep_alive(lambda n: response(
            f"reply {n}".encode(), "Connection: keep-alive", version="1.0"))) as srv:
        client = H1Client(srv.url)
        assert [await get(client) for _ in range(2)] == [b"reply 1", b"reply 2"]
        await client.aclose()
    assert srv.accepts == 1


@run_async
async def test_server_closing_after_connection_close_reply_then_next_request_succeeds() -> None:
    async def handler(srv: RawServer, reader: Reader, writer: Writer) -> None:
        await srv.read_request(reader)
        writer.write(response(b"bye", "Connection: close"))
        await writer.drain()
        writer.close()

    async with raw_server(handler) as srv:
        client = H1Client(srv.url)
        assert await get(client) == b"bye"
        assert await get(client) == b"bye"
        await client.aclose()
    assert srv.accepts == 2


# -- 2. bodies -----------------------------------------------------------------------------------

BODY = b'data: {"x": "h\xc3\xa9llo"}\n\n' * 5


async def _trickle(writer: Writer, data: bytes) -> None:
    for i in range(len(data)):
        writer.write(data[i:i + 1])
        await writer.drain()
        await asyncio.sleep(0.0005)


async def _content_length(srv: RawServer, reader: Reader, writer: Writer) -> None:
    await srv.read_request(reader)
    writer.write(response(BODY))
    await writer.drain()
    await srv.wait_for_eof(reader)


async def _chunked_byte_by_byte(srv: RawServer, reader: Reader, writer: Writer) -> None:
    await srv.read_request(reader)
    writer.write(CHUNKED_HEAD)
    await writer.drain()
    pieces = [BODY[i:i + 17] for i in range(0, len(BODY), 17)]
    await _trickle(writer, chunked(*pieces))
    await srv.wait_for_eof(reader)


async def _chunked_with_extensions_and_trailer(srv: RawServer, reader: Reader,
                                               writer: Writer) -> None:
    await srv.read_request(reader)
    half = len(BODY) // 2
    wire = (f"{half:x};name=value\r\n".encode() + BODY[:half] + b"\r\n"
            + f"{len(BODY) - half:X}\r\n".encode() + BODY[half:] + b"\r\n"
            + b"0\r\nX-Trailer: t\r\n\r\n")
    writer.write(CHUNKED_HEAD + wire)
    await writer.drain()
    await srv.wait_for_eof(reader)


async def _close_delimited(srv: RawServer, reader: Reader, writer: Writer) -> None:
    await srv.read_request(reader)
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n")
    await writer.drain()
    for i in range(0, len(BODY), 40):
        writer.write(BODY[i:i + 40])
        await writer.drain()
        await asyncio.sleep(0.001)
    writer.close()


@pytest.mark.parametrize("handler", [_content_length, _chunked_byte_by_byte,
                                     _chunked_with_extensions_and_trailer, _close_delimited])
@pytest.mark.parametrize("how", ["read", "chunks"])
@run_async
async def test_bodies_arrive_exactly(handler: Any, how: str) -> None:
    async with raw_server(handler) as srv:
        client = H1Client(srv.url, read_timeout=2)
        resp = await client.request("GET", "/", {})
        assert resp.status_code == 200
        if how == "read":
            data = await resp.read()
        else:
            pieces = [piece async for piece in resp.chunks()]
            assert all(pieces)  # no empty pieces
            if handler is _chunked_byte_by_byte:
                assert len(pieces) > 5  # delivered as it arrived, not buffered to the end
            data = b"".join(pieces)
        assert data == BODY
        reused = len(client._idle)
        await client.aclose()
    # a close-delimited body ends with the connection: it cannot go back to the pool
    assert reused == (0 if handler is _close_delimited else 1)


@run_async
async def test_an_empty_body_and_a_204() -> None:
    replies = [response(b""), b"HTTP/1.1 204 No Content\r\n\r\n", response(b"after")]
    async with raw_server(keep_alive(lambda n: replies[n - 1])) as srv:
        client = H1Client(srv.url)
        first = await client.request("GET", "/", {})
        assert (first.status_code, await first.read()) == (200, b"")
        second = await client.request("GET", "/", {})
        assert (second.status_code, await second.read()) == (204, b"")
        assert await get(client) == b"after"
        await client.aclose()
    assert srv.accepts == 1


@pytest.mark.parametrize("split", [False, True])
@run_async
async def test_interim_1xx_responses_are_skipped(split: bool) -> None:
    # RFC 9110 §15.2: a client must accept 1xx responses it did not ask for before the final one
    interim = b"HTTP/1.1 100 Continue\r\nX-Interim: 1\r\n\r\n"
    final = response(b"final", "X-Final: 1")

    async def handler(srv: RawServer, reader: Reader, writer: Writer) -> None:
        while await srv.read_request(reader):
            if split:
                writer.write(interim)
                await writer.drain()
                await asyncio.sleep(0.02)
                writer.write(final)
            else:
                writer.write(interim + b"HTTP/1.1 103 Early Hints\r\nLink: x\r\n\r\n" + final)
            await writer.drain()

    async with raw_server(handler) as srv:
        client = H1Client(srv.url, read_timeout=2)
        for _ in range(2):
            resp = await client.request("POST", "/", {}, b"x")
            assert resp.status_code == 200
            assert resp.headers.get("x-final") == "1"
            assert "x-interim" not in resp.headers
            assert await resp.read() == b"final"
        await client.aclose()
    assert srv.accepts == 1


# -- 3. the server closes an idle keep-alive connection ----------------------------------------

@run_async
async def test_an_idle_connection_the_server_closed_is_not_reused() -> None:
    async def handler(srv: RawServer, reader: Reader, writer: Writer) -> None:
        await srv.read_request(reader)
        writer.write(response(b"one"))  # keep-alive by default in HTTP/1.1 ...
        await writer.drain()
        writer.close()  # ... but the server drops it right after (idle timeout)

    async with raw_server(handler) as srv:
        client = H1Client(srv.url)
        assert await get(client) == b"one"
        await asyncio.sleep(0.05)  # asyncio delivers the close to the idle connection
        assert all(conn.closed for conn in client._idle)
        assert await get(client) == b"one"
        await client.aclose()
    assert srv.accepts == 2
    assert len(srv.requests) == 2


# -- 4. lost mid-request: a network failure, never a second send -------------------------------

@run_async
async def test_a_server_closing_without_a_response_is_a_network_error_sent_once() -> None:
    async def handler(srv: RawServer, reader: Reader, writer: Writer) -> None:
        await srv.read_request(reader)
        writer.close()

    async with raw_server(handler) as srv:
        client = H1Client(srv.url, read_timeout=2)
        with pytest.raises(H1Error) as caught:
            await client.request("POST", "/chat/completions", {}, b'{"bill": "me"}')
        await asyncio.sleep(0.1)  # room for a (wrong) retry to show up
        await client.aclose()
    assert caught.value.kind == "network"
    assert "closed the connection" in str(caught.value)
    assert srv.accepts == 1
    assert srv.requests == [(srv.requests[0][0], b'{"bill": "me"}')]


@run_async
async def test_a_reused_connection_lost_mid_request_is_not_retried() -> None:
    async def handler(srv: RawServer, reader: Reader, writer: Writer) -> None:
        await srv.read_request(reader)
        writer.write(response(b"first"))
        await writer.drain()
        await srv.read_request(reader)  # the second request arrives on the kept connection ...
        writer.close()  # ... and the server goes away without answering it

    async with raw_server(handler) as srv:
        client = H1Client(srv.url, read_timeout=2)
        assert await get(client) == b"first"
        with pytest.raises(H1Error) as caught:
            await client.request("POST", "/", {}, b"second")
        await asyncio.sleep(0.1)
        assert client._idle == []
        await client.aclose()
    assert caught.value.kind == "network"
    assert srv.accepts == 1  # no silent retry on a fresh connection
    assert [body for _, body in srv.requests] == [b"", b"second"]


@run_async
async def test_headers_cut_off_is_a_network_error() -> None:
    async def handler(srv: RawServer, reader: Reader, writer: Writer) -> None:
        await srv.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Le")
        await writer.drain()
        writer.close()

    async with raw_server(handler) as srv:
        client = H1Client(srv.url, read_timeout=2)
        with pytest.raises(H1Error) as caught:
            await client.request("GET", "/", {})
    assert caught.value.kind == "network"


# -- 5. timeouts and refused connections ---------------------------------------------------------

@pytest.mark.parametrize("how", ["read", "chunks"])
@run_async
async def test_a_stall_after_the_headers_is_a_timeout_and_closes_the_connection(how: str) -> None:
    async def handler(srv: RawServer, reader: Reader, writer: Writer) -> None:
        await srv.read_request(reader)
        writer.write(CHUNKED_HEAD + b"5\r\nhello\r\n")
        await writer.drain()
        await srv.wait_for_eof(reader)  # stalls until the client gives up

    async with raw_server(handler) as srv:
        client = H1Client(srv.url, read_timeout=0.2)
        resp = await client.request("GET", "/", {})
        pieces: list[bytes] = []
        with pytest.raises(H1Error) as caught:
            if how == "read":
                await resp.read()
            else:
                async for piece in resp.chunks():
                    pieces.append(piece)
        await srv.settle(1)
        assert srv.eofs == 1  # the connection was closed, not leaked
        assert client._idle == []
        await client.aclose()
    assert caught.value.kind == "timeout"
    assert "0.2" in str(caught.value)
    if how == "chunks":
        assert pieces == [b"hello"]


@run_async
async def test_cancelling_a_body_read_closes_the_connection() -> None:
    async def handler(srv: RawServer, reader: Reader, writer: Writer) -> None:
        await srv.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
        await writer.drain()
        await srv.wait_for_eof(reader)

    async with raw_server(handler) as srv:
        client = H1Client(srv.url, read_timeout=5)
        resp = await client.request("GET", "/", {})
        reading = asyncio.create_task(resp.read())
        await asyncio.sleep(0.05)
        reading.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reading
        await srv.settle(1)
        assert srv.eofs == 1  # closed at once, not left open until someone calls aclose()
        assert client._idle == []
        await client.aclose()


@run_async
async def test_a_server_that_never_answers_is_a_timeout() -> None:
    async def handler(srv: RawServer, reader: Reader, writer: Writer) -> None:
        await srv.read_request(reader)
        await srv.wait_for_eof(reader)

    async with raw_server(handler) as srv:
        client = H1Client(srv.url, read_timeout=0.2)
        with pytest.raises(H1Error) as caught:
            await client.request("POST", "/", {}, b"{}")
        await srv.settle(1)
        await client.aclose()
    assert caught.value.kind == "timeout"
    assert srv.eofs == 1
    assert len(srv.requests) == 1


@run_async
async def test_a_server_that_stops_reading_the_request_is_a_timeout() -> None:
    async def handler(srv: RawServer, reader: Reader, writer: Writer) -> None:
        await asyncio.sleep(30)  # a hung upstream: the kernel accepted, nobody reads

    async with raw_server(handler) as srv:
        client = H1Client(srv.url, read_timeout=0.2)
        with pytest.raises(H1Error) as caught:
            await client.request("POST", "/", {}, b"x" * (16 << 20))
        await client.aclose()
    assert caught.value.kind == "timeout"
    assert "could not send the request" in str(caught.value)


@run_async
async def test_a_refused_connection_is_a_network_error() -> None:
    client = H1Client(f"http://127.0.0.1:{closed_port()}", connect_timeout=1)
    with pytest.raises(H1Error) as caught:
        await client.request("GET", "/", {})
    assert caught.value.kind == "network"
    assert "cannot connect" in str(caught.value)


@pytest.mark.skipif(sys.platform != "linux", reason="relies on Linux dropping SYNs on a full "
                                                   "accept queue")
@run_async
async def test_a_connect_that_hangs_is_a_timeout() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    for _ in range(3):  # fill the accept queue: further SYNs are dropped
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(("127.0.0.1", port))
        fillers.append(filler)
    try:
        client = H1Client(f"http://127.0.0.1:{port}", connect_timeout=0.2)
        with pytest.raises(H1Error) as caught:
            await client.request("GET", "/", {})
    finally:
        for filler in fillers:
            filler.close()
        listener.close()
    assert caught.value.kind == "timeout"
    assert "connecting" in str(caught.value)


# -- 6. malformed responses ----------------------------------------------------------------------

@pytest.mark.parametrize("wire", [
    b"HTTP/1.1 abc\r\n\r\n",
    b"garbage\r\n\r\n",
    b"\x00\x01\x02 not http at all",
    b"HTTP/1.1 200 OK\r\nContent-Length: xyz\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nhi",
    b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
])
@run_async
async def test_malformed_responses_are_network_errors(wire: bytes) -> None:
    async def handler(srv: RawServer, reader: Reader, writer: Writer) -> None:
        await srv.read_request(reader)
        writer.write(wire)
        await writer.drain()
        await srv.wait_for_eof(reader)

    async with raw_server(handler) as srv:
        client = H1Client(srv.url, read_timeout=1)
        with pytest.raises(H1Error) as caught:
            resp = await client.request("GET", "/", {})
            await resp.read()  # some are only caught in the body
        await srv.settle(1)
        await client.aclose()
    assert caught.value.kind == "network"
    assert "malformed HTTP" in str(caught.value) or "switched protocols" in str(caught.value)
    assert srv.eofs == 1  # the broken connection was closed


@run_async
async def test_a_malformed_chunk_is_a_network_error_from_the_body() -> None:
    async def handler(srv: RawServer, reader: Reader, writer: Writer) -> None:
        await srv.read_request(reader)
        writer.write(CHUNKED_HEAD + b"5\r\nhello\r\nzz\r\nworld\r\n0\r\n\r\n")
        await writer.drain()
        await srv.wait_for_eof(reader)

    async with raw_server(handler) as srv:
        client = H1Client(srv.url, read_timeout=1)
        resp = await client.request("GET", "/", {})
        assert resp.status_code == 200
        with pytest.raises(H1Error) as caught:
            await resp.read()
        await client.aclose()
    assert caught.value.kind == "network"
    assert "malformed HTTP" in str(caught.value)


# -- 7. truncated bodies -------------------------------------------------------------------------

@pytest.mark.parametrize("wire,before", [
    (CHUNKED_HEAD + b"5\r\nhello\r\na\r\nwor", [b"hello", b"wor"]),  # mid-chunk
    (CHUNKED_HEAD + b"5\r\nhello\r\n", [b"hello"]),  # no last chunk
    (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello", [b"hello"]),
])
@run_async
async def test_a_truncated_body_raises_instead_of_ending_quietly(wire: bytes,
                                                                 before: list[bytes]) -> None:
    async def handler(srv: RawServer, reader: Reader, writer: Writer) -> None:
        await srv.read_request(reader)
        writer.write(wire)
        await writer.drain()
        await asyncio.sleep(0.02)
        writer.close()

    async with raw_server(handler) as srv:
        client = H1Client(srv.url, read_timeout=2)
        resp = await client.request("GET", "/", {})
        pieces: list[bytes] = []
        with pytest.raises(H1Error) as caught:
            async for piece in resp.chunks():
                pieces.append(piece)
        assert client._idle == []
        await client.aclose()
    assert caught.value.kind == "network"
    assert b"".join(pieces) == b"".join(before)


# -- 8. closing a response early -----------------------------------------------------------------

@run_async
async def test_aclose_before_the_body_ended_closes_the_connection() -> None:
    async def handler(srv: RawServer, reader: Reader, writer: Writer) -> None:
        await srv.read_request(reader)
        if srv.accepts == 1:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")
            await writer.drain()
            await srv.wait_for_eof(reader)
        else:
            writer.write(response(b"fresh"))
            await writer.drain()
            await srv.wait_for_eof(reader)

    async with raw_server(handler) as srv:
        client = H1Client(srv.url, read_timeout=2)
        resp = await client.request("GET", "/", {})
        body = resp.chunks()
        assert await anext(body) == b"0123456789"
        await resp.aclose()
        await body.aclose()
        await srv.settle(1)
        assert srv.eofs == 1
        assert client._idle == []
        assert await get(client) == b"fresh"
        await client.aclose()
    assert srv.accepts == 2


@run_async
async def test_aclose_of_a_finished_response_keeps_the_connection() -> None:
    replies = [response(b"read"), response(b""), response(b"third")]
    async with raw_server(keep_alive(lambda n: replies[n - 1])) as srv:
        client = H1Client(srv.url)
        first = await client.request("GET", "/", {})
        assert await first.read() == b"read"
        await first.aclose()  # already released: a no-op
        second = await client.request("GET", "/", {})  # an empty body, never read
        await asyncio.sleep(0.02)
        await second.aclose()
        assert await get(client) == b"third"
        await client.aclose()
    assert srv.accepts == 1


@run_async
async def test_concurrent_requests_use_separate_connections_and_the_pool_is_bounded() -> None:
    arrived = asyncio.Event()

    async def handler(srv: RawServer, reader: Reader, writer: Writer) -> None:
        while request := await srv.read_request(reader):
            if len(srv.requests) == 4:
                arrived.set()
            await arrived.wait()  # all four are in flight at once
            path = request[0].split(b" ")[1]
            writer.write(response(path))
            await writer.drain()
        srv.eofs += 1

    async with raw_server(handler) as srv:
        client = H1Client(srv.url, max_idle=2, read_timeout=2)
        bodies = await asyncio.gather(*(get(client, f"/r{i}") for i in range(4)))
        assert len(client._idle) == 2
        await srv.settle(2)
        assert srv.eofs == 2  # the two that did not fit the pool were closed
        await client.aclose()
        await srv.settle(4)
        assert srv.eofs == 4
        with pytest.raises(H1Error, match="closed"):
            await client.request("GET", "/", {})
    assert bodies == [b"/r0", b"/r1", b"/r2", b"/r3"]
    assert srv.accepts == 4


# -- 9. lean_client_for and proxies --------------------------------------------------------------

PROXY = "http://127.0.0.1:9"


@pytest.mark.parametrize("env,url,lean", [
    ({}, "https://api.example/v1", True),
    ({}, "http://127.0.0.1:8000/v1", True),
    ({"HTTPS_PROXY": PROXY}, "https://api.example/v1", False),
    ({"https_proxy": PROXY}, "https://api.example/v1", False),
    ({"HTTP_PROXY": PROXY}, "http://api.example/v1", False),
    ({"ALL_PROXY": PROXY}, "http://api.example/v1", False),
    ({"HTTPS_PROXY": PROXY}, "http://api.example/v1", True),  # that proxy is for https only
    ({"HTTPS_PROXY": PROXY, "NO_PROXY": "api.example"}, "https://api.example/v1", True),
    ({"HTTPS_PROXY": PROXY, "NO_PROXY": ".example"}, "https://api.example/v1", True),
    ({"HTTPS_PROXY": PROXY, "NO_PROXY": "other.example"}, "https://api.example/v1", False),
    ({"HTTP_PROXY": PROXY, "NO_PROXY": "*"}, "http://api.example/v1", True),
])
def test_lean_client_for_steps_aside_when_a_proxy_applies(
        monkeypatch: pytest.MonkeyPatch, env: dict[str, str], url: str, lean: bool) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    client = lean_client_for(url, read_timeout=5.0)
    if lean:
        assert isinstance(client, H1Client)
        assert client.read_timeout == 5.0
    else:
        assert client is None
    assert Upstream(url).lean is lean


# -- 10. Upstream on the lean client -------------------------------------------------------------

def _completion_body(stream: bool = False) -> bytes:
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    if stream:
        body["stream"] = True
    return json.dumps(body).encode()


def _sse_content(data: bytes) -> str:
    text = ""
    for line in data.decode().split("\n"):
        if line.startswith("data: {"):
            for choice in json.loads(line[6:])["choices"]:
                text += choice["delta"].get("content") or ""
    return text


@pytest.fixture(scope="module")
def _llm_server() -> Iterator[RunningLLM]:
    with serve() as running:
        yield running


@pytest.fixture
def llm(_llm_server: RunningLLM) -> RunningLLM:
    """The module's scripted server with an empty script and request log."""
    scripted = _llm_server.llm
    scripted.replies.clear()
    scripted.requests.clear()
    scripted.headers.clear()
    return _llm_server


def test_upstream_complete_and_stream_on_the_lean_client(llm: RunningLLM) -> None:
    reply = "a reply long enough to be streamed in several pieces"
    llm.llm.push(reply, reply)

    async def main() -> tuple[dict[str, Any], bytes, int]:
        upstream = Upstream(llm.base_url, api_key="upstream-key")
        assert upstream.lean
        data = await upstream.complete(_completion_body(), "client-key")
        stream = await upstream.open_stream(_completion_body(stream=True), "client-key")
        assert isinstance(stream, UpstreamStream)
        raw = b"".join([piece async for piece in stream.chunks()])
        await stream.aclose()
        assert isinstance(upstream.transport, H1Transport)
        pooled = upstream.transport.idle_connections
        await upstream.aclose()
        return data, raw, pooled

    data, raw, pooled = asyncio.run(main())
    assert data["choices"][0]["message"]["content"] == reply
    assert raw.endswith(b"data: [DONE]\n\n")
    assert _sse_content(raw) == reply
    assert pooled == 1  # both calls went over one kept connection
    assert len(llm.llm.requests) == 2
    assert llm.llm.requests[1]["stream"] is True
    assert [h["authorization"] for h in llm.llm.headers] == ["Bearer upstream-key"] * 2
    assert llm.llm.headers[0]["content-type"] == "application/json"


def test_upstream_in_open_mode_passes_the_client_bearer(llm: RunningLLM) -> None:
    async def main() -> None:
        upstream = Upstream(llm.base_url)
        await upstream.complete(_completion_body(), "client-key")
        await upstream.complete(_completion_body(), None)
        await upstream.aclose()

    asyncio.run(main())
    assert llm.llm.headers[0]["authorization"] == "Bearer client-key"
    assert "authorization" not in llm.llm.headers[1]


ERRORS = [
    (400, {"error": {"message": "bad field", "type": "invalid_request_error"}}, "bad_request"),
    (400, {"error": {"message": "This model's maximum context length is 10 tokens",
                     "code": "context_length_exceeded"}}, "overflow"),
    (401, {"error": {"message": "no key"}}, "auth"),
    (402, {"error": {"message": "pay up"}}, "quota"),
    (403, {"error": {"message": "forbidden"}}, "auth"),
    (404, {"error": {"message": "no such model"}}, "bad_request"),
    (429, {"error": {"message": "slow down"}}, "rate_limit"),
    (500, {"error": {"message": "boom"}}, "server"),
    (503, {"error": {"message": "overloaded"}}, "server"),
]


@pytest.mark.parametrize("status,error,kind", ERRORS)
def test_upstream_http_errors_are_classified(llm: RunningLLM, status: int, error: dict[str, Any],
                                             kind: str) -> None:
    llm.llm.push(ScriptedReply(status=status, error=error),
                 ScriptedReply(status=status, error=error), "fine")

    async def main() -> tuple[UpstreamError, UpstreamError, dict[str, Any]]:
        upstream = Upstream(llm.base_url)
        with pytest.raises(UpstreamError) as plain:
            await upstream.complete(_completion_body(), None)
        with pytest.raises(UpstreamError) as streamed:
            await upstream.open_stream(_completion_body(stream=True), None)
        after = await upstream.complete(_completion_body(), None)  # the client still works
        await upstream.aclose()
        return plain.value, streamed.value, after

    plain, streamed, after = asyncio.run(main())
    expected = classify_http_error(status, json.dumps(error))
    for err in (plain, streamed):
        assert err.kind == kind == expected.kind
        assert err.status == status
        assert type(err) is type(expected)
        assert str(err) == str(expected)
    assert after["choices"][0]["message"]["content"] == "fine"


def test_upstream_dead_port_is_a_network_error() -> None:
    async def main() -> list[UpstreamError]:
        upstream = Upstream(f"http://127.0.0.1:{closed_port()}/v1", connect_timeout=1)
        assert upstream.lean
        errors = []
        with pytest.raises(UpstreamError) as plain:
            await upstream.complete(_completion_body(), None)
        errors.append(plain.value)
        with pytest.raises(UpstreamError) as streamed:
            await upstream.open_stream(_completion_body(stream=True), None)
        errors.append(streamed.value)
        await upstream.aclose()
        return errors

    for err in asyncio.run(main()):
        assert err.kind == "network"
        assert err.status is None
        assert "cannot reach upstream" in str(err)


def test_upstream_dropped_connection_is_a_network_error(llm: RunningLLM) -> None:
    llm.llm.push(ScriptedReply(drop_connection=True))

    async def main() -> UpstreamError:
        upstream = Upstream(llm.base_url)
        with pytest.raises(UpstreamError) as caught:
            await upstream.complete(_completion_body(), None)
        await upstream.aclose()
        return caught.value

    assert asyncio.run(main()).kind == "network"
    assert len(llm.llm.requests) == 1  # sent once, not retried


@run_async
async def test_upstream_stalls_are_timeouts() -> None:
    async def handler(srv: RawServer, reader: Reader, writer: Writer) -> None:
        await srv.read_request(reader)
        if srv.accepts == 2:  # a JSON reply starts, then stalls
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 100\r\n\r\n{\"id\": ")
            await writer.drain()
        if srv.accepts == 4:  # the stream starts, then stalls
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n" + b"6\r\ndata: \r\n")
            await writer.drain()
        await srv.wait_for_eof(reader)

    async with raw_server(handler) as srv:
        upstream = Upstream(srv.url + "/v1", read_timeout=0.2)
        with pytest.raises(UpstreamError) as plain:
            await upstream.complete(_completion_body(), None)
        with pytest.raises(UpstreamError) as mid_body:
            await upstream.complete(_completion_body(), None)
        with pytest.raises(UpstreamError) as opening:
            await upstream.open_stream(_completion_body(stream=True), None)
        stream = await upstream.open_stream(_completion_body(stream=True), None)
        pieces: list[bytes] = []
        with pytest.raises(UpstreamError) as streaming:
            async for piece in stream.chunks():
                pieces.append(piece)
        await stream.aclose()
        await srv.settle(4)
        assert srv.eofs == 4  # every stalled connection was closed
        await upstream.aclose()
    for err in (plain.value, mid_body.value, opening.value, streaming.value):
        assert err.kind == "timeout"
        assert "upstream timed out" in str(err)
    assert pieces == [b"data: "]
    assert len(srv.requests) == 4


@run_async
async def test_upstream_stream_cut_off_is_a_network_error() -> None:
    async def handler(srv: RawServer, reader: Reader, writer: Writer) -> None:
        await srv.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n" + b"8\r\ndata: {}\r\n4\r\n\n\nda")
        await writer.drain()
        writer.close()

    async with raw_server(handler) as srv:
        upstream = Upstream(srv.url + "/v1", read_timeout=2)
        stream = await upstream.open_stream(_completion_body(stream=True), None)
        with pytest.raises(UpstreamError) as caught:
            async for _ in stream.chunks():
                pass
        await stream.aclose()
        await upstream.aclose()
    assert caught.value.kind == "network"


def test_upstream_stream_without_sse_is_a_bad_response(llm: RunningLLM) -> None:
    async def main() -> tuple[UpstreamError, int]:
        upstream = Upstream(llm.base_url)
        # no "stream": true, so the scripted server answers with JSON
        with pytest.raises(UpstreamError) as caught:
            await upstream.open_stream(_completion_body(stream=False), None)
        assert isinstance(upstream.transport, H1Transport)
        pooled = upstream.transport.idle_connections
        await upstream.complete(_completion_body(), None)  # and the next call still works
        await upstream.aclose()
        return caught.value, pooled

    err, pooled = asyncio.run(main())
    assert err.kind == "bad_response"
    assert err.status == 200
    assert "application/json" in str(err)
    assert pooled == 0  # the unread reply's connection was closed, not pooled


def test_upstream_with_an_injected_transport_uses_httpx() -> None:
    sse = b'data: {"choices": []}\n\ndata: [DONE]\n\n'
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        body = json.loads(request.content)
        if body.get("model") == "broken":
            return httpx.Response(503, json={"error": {"message": "down"}})
        if body.get("stream"):
            return httpx.Response(200, content=sse, headers={"content-type": "text/event-stream"})
        return httpx.Response(200, json={"id": "x", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "mocked"},
             "finish_reason": "stop"}]})

    async def main() -> tuple[dict[str, Any], bytes, UpstreamError]:
        upstream = Upstream("http://upstream.test/v1", api_key="k",
                            transport=httpx.MockTransport(handler))
        assert not upstream.lean
        sent: list[int] = []  # on_sent runs before httpx sends: the request not seen yet
        data = await upstream.complete(_completion_body(), None, lambda: sent.append(len(seen)))
        stream = await upstream.open_stream(_completion_body(stream=True), None,
                                            lambda: sent.append(len(seen)))
        assert sent == [0, 1]
        raw = b"".join([piece async for piece in stream.chunks()])
        await stream.aclose()
        with pytest.raises(UpstreamError) as caught:
            await upstream.complete(json.dumps({"model": "broken"}).encode(), None)
        await upstream.aclose()
        return data, raw, caught.value

    data, raw, err = asyncio.run(main())
    assert data["choices"][0]["message"]["content"] == "mocked"
    assert raw == sse
    assert err.kind == "server" and err.status == 503
    assert [str(r.url) for r in seen] == ["http://upstream.test/v1/chat/completions"] * 3
    assert seen[0].headers["authorization"] == "Bearer k"


# -- 11. large bodies and flow control -----------------------------------------------------------

@run_async
async def test_a_large_request_body_arrives_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    paused = 0
    original = h1._Connection.pause_writing

    def counting(self: Any) -> None:
        nonlocal paused
        paused += 1
        original(self)

    monkeypatch.setattr(h1._Connection, "pause_writing", counting)
    payload = bytes(i % 251 for i in range(5 << 20))

    async def handler(srv: RawServer, reader: Reader, writer: Writer) -> None:
        await asyncio.sleep(0.1)  # let the client's send buffer fill up first
        while request := await srv.read_request(reader):
            body = request[1]
            writer.write(response(f"{len(body)} {hashlib.sha256(body).hexdigest()}".encode()))
            await writer.drain()

    async with raw_server(handler) as srv:
        client = H1Client(srv.url, read_timeout=5)
        resp = await client.request("POST", "/upload", {}, payload)
        answer = await resp.read()
        assert await get(client) == b"0 " + hashlib.sha256(b"").hexdigest().encode()
        await client.aclose()
    assert answer == f"{len(payload)} {hashlib.sha256(payload).hexdigest()}".encode()
    assert srv.requests[0][1] == payload
    assert paused >= 1  # the write really waited for the socket to drain
    assert srv.accepts == 1


@run_async
async def test_a_large_streamed_response_arrives_whole_and_in_order() -> None:
    pieces = [i.to_bytes(4, "big") * 16384 for i in range(128)]  # 128 × 64 KiB = 8 MiB
    expected = b"".join(pieces)

    async def handler(srv: RawServer, reader: Reader, writer: Writer) -> None:
        while await srv.read_request(reader):
            if len(srv.requests) == 1:
                writer.write(CHUNKED_HEAD)
                for piece in pieces:
                    writer.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                    await writer.drain()
                writer.write(b"0\r\n\r\n")
            else:
                writer.write(response(b"next"))
            await writer.drain()

    async with raw_server(handler) as srv:
        client = H1Client(srv.url, read_timeout=5)
        resp = await client.request("GET", "/big", {})
        await asyncio.sleep(0.3)  # the reader lags: the client must stop reading the socket
        conn = resp._conn
        assert conn is not None and conn.transport is not None
        assert HIGH_WATER < conn.buffered < 2 * HIGH_WATER
        assert not conn.transport.is_reading()
        received = bytearray()
        async for piece in resp.chunks():
            received += piece
        assert await get(client) == b"next"  # reading resumed: the connection is clean
        await client.aclose()
    assert len(received) == len(expected)
    assert bytes(received) == expected
    assert srv.accepts == 1


# -- on_sent: work that overlaps the server's ----------------------------------------------------

@run_async
async def test_on_sent_runs_once_after_the_request_is_written_before_the_response() -> None:
    """``on_sent`` runs when the request is handed to the socket: the server can already read
    it, and no response byte exists yet (the server answers only when told)."""
    answer = asyncio.Event()
    got_request = asyncio.Event()

    async def handler(srv: RawServer, reader: Reader, writer: Writer) -> None:
        while await srv.read_request(reader):
            got_request.set()
            await answer.wait()
            writer.write(response(b"ok"))
            await writer.drain()

    async with raw_server(handler) as srv:
        client = H1Client(srv.url)
        calls: list[int] = []

        def sent() -> None:
            calls.append(len(srv.requests))

        pending = asyncio.ensure_future(client.request("POST", "/", {}, b'{"a": 1}', sent))
        await asyncio.wait_for(got_request.wait(), 5)
        assert calls == [0]  # ran before the server had even read it, and only once
        assert not pending.done()  # the response is still to come
        answer.set()
        resp = await pending
        assert await resp.read() == b"ok"
        second: list[bool] = []
        resp = await client.request("POST", "/", {}, b"{}", lambda: second.append(True))
        assert await resp.read() == b"ok" and second == [True]  # a reused connection too
        await client.aclose()
    assert calls == [0] and len(srv.requests) == 2


@run_async
async def test_on_sent_does_not_run_when_no_connection_could_be_had() -> None:
    client = H1Client(f"http://127.0.0.1:{closed_port()}", connect_timeout=1)
    calls: list[bool] = []
    with pytest.raises(H1Error):
        await client.request("POST", "/", {}, b"{}", lambda: calls.append(True))
    assert calls == []
