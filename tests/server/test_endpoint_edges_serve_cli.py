"""``refold serve`` with a database it cannot open: one ``error: …`` line and exit 1, before
the "serving" banner, with one worker as with ``--workers 2``. Before, one worker printed the
banner, then uvicorn's startup traceback and "Application startup failed", and exited 3."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest


def _serve(home: Path, db: str, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFOLD_")}
    return subprocess.run(
        [sys.executable, "-m", "refold.cli.main", "--home", str(home), "--db", db, "serve",
         "--upstream", "http://127.0.0.1:9/v1", "--port", "0", *extra],
        capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_database_that_cannot_be_opened_is_one_error_line_and_exit_1(
        tmp_path: Path, workers: str) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    done = _serve(tmp_path / "home", str(blocker / "refold.db"), "--workers", workers)
    assert done.returncode == 1, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "refold.db" in lines[0]
    assert "Traceback" not in done.stderr and "refold serve: http" not in done.stderr


def test_a_postgres_server_that_refuses_is_one_error_line_and_exit_1(tmp_path: Path) -> None:
    pytest.importorskip("psycopg")
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = _serve(tmp_path / "home", f"postgresql://postgres@127.0.0.1:{port}/x")
    assert done.returncode == 1, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "PostgreSQL" in lines[0] and "Traceback" not in done.stderr
