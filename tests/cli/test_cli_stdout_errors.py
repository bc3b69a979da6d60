"""Standard output that cannot be written: a full disk (``> /dev/full``) is one ``error:``
line and a non-zero exit, never a traceback; a closed pipe (``refold … | head``) still ends
quietly with status 0. Run as the console script runs, in a subprocess with real descriptors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SAMPLE = Path(__file__).resolve().parents[2] / "src" / "refold" / "data" / "sample_session.jsonl"
FULL = "/dev/full"

needs_dev_full = pytest.mark.skipif(not os.path.exists(FULL), reason="no /dev/full here")


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("stdout") / "home"
    done = _refold(home, "import", str(SAMPLE))
    assert done.returncode == 0, done.stderr
    return home


@pytest.fixture(scope="module")
def sid(home: Path) -> str:
    listed = _refold(home, "sessions", "list", "--json")
    return str(json.loads(listed.stdout)[0]["id"])


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("REFOLD_")}


def _refold(home: Path, *args: str, stdout: int | None = subprocess.PIPE
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "refold.cli.main", "--home", str(home), *args],
                          stdout=stdout, stderr=subprocess.PIPE, text=True, env=_env(),
                          timeout=120, check=False)


@needs_dev_full
@pytest.mark.parametrize("args", [
    ("search", "ROUND_HALF_UP"),  # the click-free search path
    ("search", "ROUND_HALF_UP", "--json"),
    ("sessions", "list"),  # a rich table
    ("sessions", "export", "SID"),  # written while the command runs, not at exit
    ("config", "show"),
    ("--version",),
])
def test_a_full_disk_on_stdout_is_one_error_line(home: Path, sid: str,
                                                  args: tuple[str, ...]) -> None:
    with open(FULL, "w") as full:
        done = _refold(home, *[sid if a == "SID" else a for a in args], stdout=full.fileno())
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.splitlines() == [
        "error: cannot write to standard output: No space left on device"], done.stderr
    assert done.returncode == 1


@needs_dev_full
def test_an_oserror_of_the_command_itself_is_not_blamed_on_stdout(home: Path, sid: str) -> None:
    done = _refold(home, "sessions", "export", sid, "-o", FULL)
    assert done.returncode == 2 and "cannot write /dev/full" in done.stderr
    assert "standard output" not in done.stderr


@pytest.mark.parametrize("args", [("search", "ROUND_HALF_UP"), ("sessions", "export", "SID"),
                                  ("sessions", "list"), ("config", "show")])
def test_a_closed_pipe_still_ends_quietly(home: Path, sid: str, args: tuple[str, ...]) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "refold.cli.main", "--home", str(home),
                             *[sid if a == "SID" else a for a in args]],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader went away before the first line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, err
    assert err == ""
