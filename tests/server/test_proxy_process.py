"""``refold serve`` as a real process: killed mid-stream it loses no acknowledged message, and a
graceful stop (SIGTERM) lets the stream in flight finish and be recorded.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import serve_process  # tests/server is on sys.path (pytest rootdir-relative import)
from serve_process import CLIENT_TIMEOUT

from refold.store.sqlite import SQLiteStore
from refold.testing import ScriptedReply, serve

SLOW = ScriptedReply(content="The second answer streams slowly, word after word. " * 8,
                     chunk_delay=0.05)


def start_serve(home: Path, upstream: str, *extra: str,
                env_extra: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], str]:
    served = serve_process.start_serve(home, upstream, *extra, env_extra=env_extra)
    return served.proc, served.url


def rows(home: Path) -> list[tuple[str, str]]:
    store = SQLiteStore(str(home / "refold.db"))
    try:
        (session,) = store.list_sessions()
        return [(r.role, str(r.message.get("content"))) for r in store.get_messages(session.id)]
    finally:
        store.close()


def read_until_content(lines: Iterator[str]) -> None:
    for line in lines:
        if line.startswith("data:") and '"content": "The' in line:
            return
    raise AssertionError("the stream ended before any content")


@pytest.mark.slow
def test_sigkill_mid_stream_loses_no_acknowledged_message(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with serve(["First answer.", SLOW, "Second answer, retried."]) as up:
        proc, url = start_serve(home, up.base_url)
        try:
            history: list[dict[str, Any]] = [{"role": "user", "content": "first question"}]
            first = httpx.post(url + "/chat/completions", timeout=CLIENT_TIMEOUT,
                               json={"model": "m", "messages": history})
            assert first.status_code == 200
            history += [{"role": "assistant", "content": "First answer."},
                        {"role": "user", "content": "second question"}]
            with httpx.stream("POST", url + "/chat/completions", timeout=CLIENT_TIMEOUT, json={
                    "model": "m", "messages": history, "stream": True}) as response:
                assert response.status_code == 200  # the request's messages are acknowledged
                lines = response.iter_lines()
                read_until_content(lines)
                proc.send_signal(signal.SIGKILL)
                proc.wait(10)
                with pytest.raises(httpx.HTTPError):
                    for _ in lines:
                        pass
        finally:
            proc.kill()
            proc.wait(10)
        assert rows(home) == [("user", "first question"), ("assistant", "First answer."),
                              ("user", "second question")]  # nothing partial either

        proc, url = start_serve(home, up.base_url)
        try:  # the client retries its turn: nothing is duplicated
            again = httpx.post(url + "/chat/completions", timeout=CLIENT_TIMEOUT,
                               json={"model": "m", "messages": history})
            assert again.status_code == 200
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    assert rows(home) == [("user", "first question"), ("assistant", "First answer."),
                          ("user", "second question"), ("assistant", "Second answer, retried.")]


@pytest.mark.slow
def test_sigterm_drains_the_stream_in_flight_and_records_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with serve([SLOW]) as up:
        proc, url = start_serve(home, up.base_url)
        try:
            with httpx.stream("POST", url + "/chat/completions", timeout=CLIENT_TIMEOUT, json={
                    "model": "m", "stream": True,
                    "messages": [{"role": "user", "content": "talk slowly"}]}) as response:
                lines = response.iter_lines()
                read_until_content(lines)
                proc.send_signal(signal.SIGTERM)
                tail = list(lines)
            assert "data: [DONE]" in tail
            # uvicorn re-raises the signal after its graceful shutdown
            assert proc.wait(60) in (0, -signal.SIGTERM)
        finally:
            proc.kill()
            proc.wait(10)
    assert rows(home) == [("user", "talk slowly"), ("assistant", SLOW.content)]


def test_serve_without_upstream_or_on_a_taken_port_is_one_clear_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFOLD_")}
    base = [sys.executable, "-m", "refold.cli.main", "--home", str(tmp_path), "serve"]
    missing = subprocess.run(base, capture_output=True, text=True, env=env, timeout=30)
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines() == [
        "error: no upstream to forward to (pass --upstream URL or set REFOLD_UPSTREAM)"]
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        busy = subprocess.run([*base, "--upstream", "http://127.0.0.1:9/v1", "--port",
                               str(port)], capture_output=True, text=True, env=env, timeout=30)
    assert busy.returncode == 2
    assert busy.stderr.strip().splitlines() == [
        f"error: port {port} on 127.0.0.1 is already in use "
        "(stop the other server or pick another --port)"]


def test_serve_with_a_memory_provider_that_cannot_load_says_so_at_start(
        tmp_path: Path) -> None:
    """``memory.provider`` naming a provider that is not installed started the server, and
    every chat request then failed with a 404: it is one clear line at start."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFOLD_")}
    (tmp_path / "refold.toml").write_text('[memory]\nprovider = "nonexistent"\n')
    done = subprocess.run([sys.executable, "-m", "refold.cli.main", "--home", str(tmp_path),
                           "serve", "--upstream", "http://127.0.0.1:9/v1", "--port", "0"],
                          capture_output=True, text=True, env=env, timeout=30)
    assert done.returncode == 2
    assert done.stderr.strip().startswith("error: no memory provider named 'nonexistent'")
    assert "Traceback" not in done.stderr


def test_serve_takes_client_keys_from_named_env_variables(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFOLD_")}
    base = [sys.executable, "-m", "refold.cli.main", "--home", str(tmp_path), "serve",
            "--upstream", "http://127.0.0.1:9/v1"]
    unset = subprocess.run([*base, "--api-key-env", "H7_NO_SUCH_VAR"], capture_output=True,
                           text=True, env=env, timeout=30)
    assert unset.returncode == 2
    assert unset.stderr.strip() == \
        "error: --api-key-env H7_NO_SUCH_VAR: the variable is not set or empty"
    with serve(["hello"]) as up:
        proc, url = start_serve(tmp_path / "home", up.base_url, "--api-key-env", "TEAM_KEYS",
                                env_extra={"TEAM_KEYS": "k-one,k-two"})
        try:
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            denied = httpx.post(url + "/chat/completions", json=body, timeout=CLIENT_TIMEOUT)
            assert denied.status_code == 401
            ok = httpx.post(url + "/chat/completions", json=body, timeout=CLIENT_TIMEOUT,
                            headers={"Authorization": "Bearer k-two"})
            assert ok.status_code == 200
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_or_sigterm_stops_serve_cleanly(tmp_path: Path,
                                              stop_signal: signal.Signals) -> None:
    """After its graceful stop uvicorn raised the signal again: Ctrl-C ended the one-worker
    server with "aborted" and status 130 (SIGTERM: killed, 143), as if a turn had been cut;
    `--workers N` exits 0 and says it stopped."""
    with serve([]) as upstream:
        served = serve_process.start_serve(tmp_path / "home", upstream.base_url)
        try:
            answered = httpx.post(served.url + "/chat/completions", timeout=CLIENT_TIMEOUT,
                                  json={"model": "m",
                                        "messages": [{"role": "user", "content": "hi"}]})
            assert answered.status_code == 200, answered.text
            served.proc.send_signal(stop_signal)
            code = served.proc.wait(60)
        finally:
            if served.proc.poll() is None:
                served.proc.kill()
    log = served.text()
    assert code == 0, log
    assert f"refold serve: {stop_signal.name}, stopped" in log and "aborted" not in log, log
