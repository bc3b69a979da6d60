"""The I/O seams of the resolvers: a file reader, a git runner and an optional URL fetcher.

Each is a small Protocol so tests (and embedders) can swap it; the defaults read the local disk
and run the local ``git``. The git runner is hardened because a repository is untrusted input:
its config can name programs to run (``core.fsmonitor``, ``diff.external``, textconv drivers,
pagers, hooks) and its revision names can look like options. So every call disables those,
passes ``--end-of-options`` before anything the user typed, takes no stdin, reads no system or
global config, never prompts, and times out. A failed call says why in git's words where they
are one line (its first ``fatal:``), and in plain words where git's are not: outside a
repository ``git diff`` falls back to comparing two paths and prints that mode's usage, and in
a repository with no commits ``git show HEAD`` says how to separate paths from revisions.
There is no default URL fetcher: ``@url`` is refused unless the caller passes one.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, Protocol

from refold.errors import InvalidInput

UrlFetcher = Callable[[str], str]

GIT_TIMEOUT = 30.0
MAX_READ_BYTES = 8 * 1024 * 1024  # a file is cut to the budget anyway; never read more than this
BINARY_SNIFF = 8192
_BLOCK = 1024 * 1024  # a line range is searched for a block at a time


class FileReader(Protocol):
    def read(self, path: Path, limit: int) -> bytes: ...
    def listing(self, path: Path) -> list[Path]: ...


class LineReader(Protocol):
    """A ``FileReader`` that can also find a line range anywhere in a file (``LocalFiles``);
    a reader without ``read_lines`` has its range taken from what ``read`` returns."""

    def read_lines(self, path: Path, first: int, last: int, limit: int) -> tuple[bytes, int]:
        ...


class GitRunner(Protocol):
    def run(self, args: list[str], cwd: Path) -> str: ...


class LocalFiles:
    """Reads the local disk, at most ``limit`` bytes of a file."""

    def read(self, path: Path, limit: int) -> bytes:
        with path.open("rb") as fh:
            return fh.read(limit)

    def read_lines(self, path: Path, first: int, last: int, limit: int) -> tuple[bytes, int]:
        """Lines ``first``..``last`` of the file, however far in: see ``read_lines``."""
        with path.open("rb") as fh:
            return read_lines(fh, first, last, limit)

    def listing(self, path: Path) -> list[Path]:
        return sorted(path.iterdir(), key=lambda p: p.name)


def read_lines(fh: BinaryIO, first: int, last: int, limit: int) -> tuple[bytes, int]:
    """Lines ``first``..``last`` (counted from 1, each ending at a line feed) of a binary
    stream, at most ``limit`` bytes of them, and how far it got: the stream's line count when it
    ends before line ``first`` (a last line without a line feed counts), else the last line
    reached (at least ``first``).

    The stream is read a block at a time up to the range's end, never whole: memory stays at
    one block plus ``limit`` however far in the range is."""
    line = 1  # the line the next byte belongs to
    out = bytearray()
    tail = b""  # the last byte read: does the stream end with a line break?
    while line <= last and len(out) < limit:
        block = fh.read(_BLOCK)
        if not block:
            return bytes(out), line - 1 if tail in (b"", b"\n") else line
        tail = block[-1:]
        pos = 0
        if line < first:
            breaks = block.count(b"\n")
            if line + breaks < first:
                line += breaks
                continue
            for _ in range(first - line):
                pos = block.index(b"\n", pos) + 1
            line = first
        while pos < len(block) and line <= last and len(out) < limit:
            end = block.find(b"\n", pos)
            stop = len(block) if end < 0 else end + 1
            out += block[pos:stop][:limit - len(out)]
            pos = stop
            if end >= 0:
                line += 1
    return bytes(out), min(line, last)


def looks_binary(data: bytes) -> bool:
    """A NUL byte or mostly undecodable bytes in the first 8 KB: not text to inline."""
    head = data[:BINARY_SNIFF]
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
        done = self._call(args, cwd)
        if done.returncode != 0:
            raise InvalidInput(self._failure(done, cwd))
        return done.stdout.decode("utf-8", "replace")

    def _call(self, args: list[str], cwd: Path) -> subprocess.CompletedProcess[bytes]:
        try:
            return subprocess.run(args, cwd=cwd, capture_output=True, stdin=subprocess.DEVNULL,
                                  timeout=self.timeout, env=git_env(), check=False)
        except FileNotFoundError as exc:
            raise InvalidInput("git is not installed") from exc
        except subprocess.TimeoutExpired as exc:
            raise InvalidInput(f"git timed out after {self.timeout:g}s") from exc

    def _failure(self, done: subprocess.CompletedProcess[bytes], cwd: Path) -> str:
        """Why a git call failed, in one line. git's stderr alone can mislead, so ``cwd`` is
        asked whether it is in a repository and whether HEAD names a commit."""
        said = done.stderr.decode("utf-8", "replace")
        try:
            head = self._call(["git", "--no-pager", *HARDENING, "rev-parse", "--verify",
                               "--quiet", "HEAD"], cwd)
        except InvalidInput:
            head = None
        if head is not None and head.returncode not in (0, 1):  # not a (usable) repository
            why = git_error(head.stderr.decode("utf-8", "replace"))
            return "not a git repository" if why is None or "not a git repository" in \
                why.lower() else why
        if head is not None and head.returncode == 1 and (
                "unknown revision" in said or "does not have any commits" in said):
            return "the repository has no commits yet"
        return git_error(said) or f"git exited with {done.returncode}"


def git_error(stderr: str) -> str | None:
    """git's first ``fatal:`` (else ``error:``) line without its prefix, an unknown revision
    said plainly; None when there is none (usage text, hints, warnings are not the reason)."""
    lines = [line.strip() for line in stderr.splitlines()]
    for prefix in ("fatal:", "error:"):
        for line in lines:
            if line.startswith(prefix):
                reason = line[len(prefix):].strip()
                unknown = _UNKNOWN_REVISION.match(reason)
                return f"unknown revision {unknown.group(1)!r}" if unknown else reason
    return None


_UNKNOWN_REVISION = re.compile(r"ambiguous argument '(.*)': unknown revision")


__all__ = ["FileReader", "GitRunner", "LineReader", "LocalFiles", "LocalGit", "UrlFetcher",
           "git_env", "git_error", "hardened_argv", "looks_binary", "read_lines"]
