"""``refold serve`` as a real child process, for the process tests (tests/server is on sys.path).

A cold ``refold serve`` on a loaded machine can take many seconds to import, open its store and
answer its first request, so the waits here are generous: ``start_serve`` returns only once the
server answers ``GET /v1/models``, and clients get ``CLIENT_TIMEOUT``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

BANNER = re.compile(r"http://127\.0\.0\.1:(\d+)/v1")
WORKER = re.compile(r"refold serve: worker (\d+) started")
START_SECONDS = 90.0  # until the first answer of a cold process
CLIENT_TIMEOUT = 60.0  # per request: the first turn of a cold process loads the tokenizer


class Served:
    """A running ``refold serve``: its process, its /v1 URL and its log file."""

    def __init__(self, proc: subprocess.Popen[bytes], url: str, log: Path) -> None:
        self.proc = proc
        self.url = url
        self.log = log

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def workers(self) -> list[int]:
        """Every worker pid the supervisor announced, in order (restarts included)."""
        return [int(pid) for pid in WORKER.findall(self.text())]


def start_serve(home: Path, upstream: str, *extra: str,
                env_extra: dict[str, str] | None = None) -> Served:
    log = home / f"serve-{time.monotonic_ns()}.log"
    home.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFOLD_")}
    env.update(env_extra or {})
    proc = subprocess.Popen(
        [sys.executable, "-m", "refold.cli.main", "--home", str(home), "serve",
         "--upstream", upstream, "--port", "0", *extra],
        stdout=subprocess.DEVNULL, stderr=log.open("wb"), env=env)
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        match = BANNER.search(log.read_text(errors="replace"))
        if match:
            url = f"http://127.0.0.1:{match.group(1)}/v1"
            try:
                if httpx.get(url + "/models", timeout=CLIENT_TIMEOUT).status_code in (200, 401):
                    return Served(proc, url, log)
            except httpx.HTTPError:
                pass
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    proc.wait(10)
    raise RuntimeError(f"refold serve did not start: {log.read_text(errors='replace')}")


def stop(served: Served, timeout: float = 60.0) -> int:
    """SIGTERM and wait; the exit status (SIGKILL if it does not stop within ``timeout``)."""
    import signal

    if served.proc.poll() is None:
        served.proc.send_signal(signal.SIGTERM)
    try:
        return served.proc.wait(timeout)
    finally:
        if served.proc.poll() is None:
            served.proc.kill()
            served.proc.wait(10)


def wait_for(condition: Callable[[], bool], what: str, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds:.0f}s: {what}")
        time.sleep(0.05)


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"
