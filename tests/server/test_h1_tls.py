"""The lean upstream client over TLS (hosted APIs are https): a local TLS server with a
self-signed certificate made by the ``openssl`` command for this test."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from refold.errors import UpstreamError
from refold.server.h1 import H1Client, H1Error
from refold.server.upstream import Upstream

BODY = b'{"id": "x", "choices": [{"message": {"role": "assistant", "content": "hi"}}]}'


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed (needed to make a test certificate)")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                    "-keyout", str(key), "-out", str(cert), "-days", "2",
                    "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True)
    yield cert, key


async def _serve_tls(cert: Path, key: Path, accepted: list[int]) -> asyncio.Server:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(cert), str(key))

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                await reader.readexactly(length)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (len(BODY), BODY))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0, ssl=context)


def test_requests_over_tls_verify_the_certificate_and_reuse_the_connection(
        certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    cert, key = certificate
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # trust the test's own certificate

    async def run() -> tuple[list[bytes], int]:
        accepted: list[int] = []
        server = await _serve_tls(cert, key, accepted)
        port = server.sockets[0].getsockname()[1]
        client = H1Client(f"https://localhost:{port}/v1", read_timeout=5)
        try:
            bodies = []
            for _ in range(3):
                response = await client.request("POST", "/chat/completions",
                                                 {"Content-Type": "application/json"}, b"{}")
                assert response.status_code == 200
                bodies.append(await response.read())
            return bodies, len(accepted)
        finally:
            await client.aclose()
            server.close()
            await server.wait_closed()

    bodies, connections = asyncio.run(run())
    assert bodies == [BODY] * 3
    assert connections == 1  # TLS keep-alive: one handshake for three requests


def test_an_untrusted_certificate_is_refused(certificate: tuple[Path, Path],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    cert, key = certificate
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)  # certifi's bundle: not our cert

    async def run() -> tuple[H1Error | None, UpstreamError | None]:
        server = await _serve_tls(cert, key, [])
        port = server.sockets[0].getsockname()[1]
        client = H1Client(f"https://localhost:{port}/v1", read_timeout=5)
        upstream = Upstream(f"https://localhost:{port}/v1", read_timeout=5)
        lean_error = upstream_error = None
        try:
            try:
                await client.request("POST", "/chat/completions", {}, b"{}")
            except H1Error as exc:
                lean_error = exc
            try:
                await upstream.complete(b"{}", None)
            except UpstreamError as exc:
                upstream_error = exc
        finally:
            await client.aclose()
            await upstream.aclose()
            server.close()
            await server.wait_closed()
        return lean_error, upstream_error

    lean_error, upstream_error = asyncio.run(run())
    assert lean_error is not None and lean_error.kind == "network"
    assert "certificate" in str(lean_error).lower()
    assert upstream_error is not None and upstream_error.kind == "network"


def test_upstream_completes_over_tls(certificate: tuple[Path, Path],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    cert, key = certificate
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)

    async def run() -> dict[str, object]:
        server = await _serve_tls(cert, key, [])
        port = server.sockets[0].getsockname()[1]
        upstream = Upstream(f"https://localhost:{port}/v1", read_timeout=5)
        assert upstream.lean
        try:
            return await upstream.complete(b"{}", "key")
        finally:
            await upstream.aclose()
            server.close()
            await server.wait_closed()

    data = asyncio.run(run())
    assert data["id"] == "x"
