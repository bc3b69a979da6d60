"""The I/O seams of the resolvers: a file reader, a git runner and an optional URL fetcher.

Each is a small Protocol so tests (and embedders) can swap it; the defaults read the local disk
and run the local ``git``. The git runner is hardened because a repository is untrusted input:
its config can name programs to run (``core.fsmonitor``, ``diff.external``, textconv drivers,
pagers, hooks) and its revision names can look like options. So every call disables those,
passes ``--end-of-options`` before anything the user typed, takes no stdin, reads no system or
global config, never prompts, and times out. There is no default URL fetcher: ``@url`` is
refused unless the caller passes one.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from refold.errors import InvalidInput

UrlFetcher = Callable[[str], str]

GIT_TIMEOUT = 30.0
MAX_READ_BYTES = 8 * 1024 * 1024  # a file is cut to the budget anyway; never read more than this
_BINARY_SNIFF = 8192


class FileReader(Protocol):
    def read(self, path: Path, limit: int) -> bytes: ...
    def listing(self, path: Path) -> list[Path]: ...


class GitRunner(Protocol):
    def run(self, args: list[str], cwd: Path) -> str: ...


class LocalFiles:
    """Reads the local disk, at most ``limit`` bytes of a file."""

    def read(self, path: Path, limit: int) -> bytes:
        with path.open("rb") as fh:
            return fh.read(limit)

    def listing(self, path: Path) -> list[Path]:
        return sorted(path.iterdir(), key=lambda p: p.name)


def looks_binary(data: bytes) -> bool:
    """A NUL byte or mostly undecodable bytes in the first 8 KB: not text to inline."""
    head = data[:_BINARY_SNIFF]
    if b"\x00" in head:
        return True
    if not head:
        return False
    try:
        head.decode("utf-8")
        return False
    except UnicodeDecodeError as exc:
        # a multi-byte character cut at the sniff boundary is still text
        return exc.start < len(head) - 4


HARDENING = (
    "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-c", "core.pager=cat",
    "-c", "diff.external=", "-c", "core.sshCommand=false", "-c", "protocol.allow=never",
    "-c", "credential.helper=", "-c", "color.ui=false",
)
_SAFE_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TZ")


def hardened_argv(command: str, options: list[str], operands: list[str]) -> list[str]:
    """``git <hardening> <command> <options> --no-ext-diff --no-textconv --end-of-options
    <operands>`` (the diff flags only for commands that take them)."""
    if command not in ("diff", "show", "log"):
        raise InvalidInput(f"git {command} is not allowed in a reference")
    tail = ["--no-ext-diff", "--no-textconv", "--no-color"]
    return ["git", "--no-pager", *HARDENING, command, *options, *tail, "--end-of-options",
            *operands]


def git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in _SAFE_ENV}
    env.update(GIT_TERMINAL_PROMPT="0", GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull,
               GIT_OPTIONAL_LOCKS="0", GIT_PAGER="cat", PAGER="cat", GIT_ASKPASS="false",
               SSH_ASKPASS="false")
    return env


class LocalGit:
    """Runs the local ``git`` with the hardened argv (the caller builds it)."""

    def __init__(self, *, timeout: float = GIT_TIMEOUT) -> None:
        self.timeout = timeout

    def run(self, args: list[str], cwd: Path) -> str:
        try:
            done = subprocess.run(args, cwd=cwd, capture_output=True, stdin=subprocess.DEVNULL,
                                  timeout=self.timeout, env=git_env(), check=False)
        except FileNotFoundError as exc:
            raise InvalidInput("git is not installed") from exc
        except subprocess.TimeoutExpired as exc:
            raise InvalidInput(f"git timed out after {self.timeout:g}s") from exc
        if done.returncode != 0:
            error = done.stderr.decode("utf-8", "replace").strip().splitlines()
            raise InvalidInput(error[-1] if error else f"git exited with {done.returncode}")
        return done.stdout.decode("utf-8", "replace")


__all__ = ["FileReader", "GitRunner", "LocalFiles", "LocalGit", "UrlFetcher", "git_env",
           "hardened_argv", "looks_binary"]
