"""Writing an output file without ever destroying what was there: temp file, then rename.

``atomic_output`` is how refold writes a file the user named (an export, a backup): the content
goes to a temporary file beside the target and replaces the target only once it is complete, so
a failed or interrupted write leaves an existing file exactly as it was. It refuses

- a *protected* path — refold's own files (the database and its ``-wal``/``-shm``/``-journal``
  companions, memory files, settings), compared after resolving symlinks and by inode, so
  ``-o ~/.local/share/refold/refold.db`` or ``-o memories/MEMORY.md`` can never truncate them;
- an existing file unless ``force`` (a mistyped path must not replace a user's file silently).

A symlink is written through: the file it points to is replaced, the link stays (renaming over
the link itself would turn ``-o /dev/stdout`` into a regular file in ``/dev``). A target that is
not a regular file (a terminal, a pipe, ``/dev/null``: nothing there to lose) is written to
directly, with no temporary file, and needs no ``force``.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TextIO

from refold.errors import InvalidInput

SQLITE_COMPANIONS = ("", "-wal", "-shm", "-journal")


def sqlite_files(path: str | Path) -> list[Path]:
    """The database file and the companion files SQLite keeps beside it."""
    return [Path(f"{path}{suffix}") for suffix in SQLITE_COMPANIONS]


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def is_protected(target: Path, protected: Iterable[Path]) -> Path | None:
    """The protected path ``target`` names (directly, through a symlink or a hard link), or
    None. A protected directory covers every file below it."""
    real = Path(os.path.realpath(target))
    for guarded in protected:
        guarded_real = Path(os.path.realpath(guarded))
        if real == guarded_real or _same_file(target, guarded):
            return guarded
        if guarded_real.is_dir() and real.is_relative_to(guarded_real):
            return guarded
    return None


# a process's own open files: whatever they lead to, the caller's descriptor is the output
_DESCRIPTORS = ("/dev/stdout", "/dev/stderr", "/dev/fd/", "/proc/self/fd/")


def is_stream(target: Path) -> bool:
    """True when ``target`` is one of the process's descriptors (``/dev/stdout``, even when the
    shell sent it to a file) or exists, through symlinks, as neither a regular file nor a
    directory: a terminal, a pipe, a socket, a device such as ``/dev/null``."""
    if str(target).startswith(_DESCRIPTORS):
        return True
    try:
        mode = target.stat().st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def check_output_path(target: Path, protected: Iterable[Path], *, force: bool) -> None:
    """``InvalidInput`` unless ``target`` may be written (see the module docstring)."""
    guarded = is_protected(target, protected)
    if guarded is not None:
        raise InvalidInput(f"refusing to write {target}: it is refold's own file ({guarded})",
                           hint="choose another output path")
    if target.is_dir():
        raise InvalidInput(f"cannot write {target}: it is a directory")
    if target.exists() and not force and not is_stream(target):
        raise InvalidInput(f"{target} exists already", hint="pass --force to replace it")


@contextlib.contextmanager
def atomic_output(target: str | Path, *, protected: Iterable[Path] = (),
                  force: bool = False) -> Iterator[TextIO]:
    """A text file that becomes ``target`` only when the ``with`` block completes."""
    named = Path(target)
    check_output_path(named, list(protected), force=force)
    if is_stream(named):  # a terminal, a pipe, /dev/null: written as it goes
        try:
            stream = open(named, "w", encoding="utf-8", newline="")  # noqa: SIM115
        except OSError as exc:
            raise InvalidInput(f"cannot write {named}: {exc.strerror or exc}") from exc
        with stream:
            yield stream
        return
    # through a symlink: replace the file it names, never the link itself
    path = Path(os.path.realpath(named)) if named.is_symlink() else named
    directory = path.parent if str(path.parent) else Path(".")
    _sweep_dead_temps(directory, path.name)
    try:  # named for its writer: a temp file a killed writer left is swept by the next one
        fd, temp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp",
                                    dir=directory)
    except OSError as exc:
        raise InvalidInput(f"cannot write {path}: {exc.strerror or exc}") from exc
    try:
        os.chmod(temp, path.stat().st_mode & 0o777 if path.exists() else 0o644)
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


DEAD_TEMP_SECONDS = 60.0  # a temp file whose writer is gone is left this long (clock skew)


def _sweep_dead_temps(directory: Path, name: str) -> None:
    """Remove the temp files of ``name`` (``.NAME.PID.XXXX.tmp``) whose writing process is
    gone: an export killed mid-write (kill -9, a power cut) left one, up to the whole export's
    size, and nothing removed it. A live writer's (another export to the same path) stays."""
    prefix = f".{name}."
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        middle = entry.name[len(prefix):-len(".tmp")] if entry.name.startswith(prefix) \
            and entry.name.endswith(".tmp") else ""
        pid_text = middle.split(".", 1)[0]
        if not pid_text.isdigit() or int(pid_text) == os.getpid() or _alive(int(pid_text)):
            continue
        with contextlib.suppress(OSError):
            if time.time() - entry.stat(follow_symlinks=False).st_mtime >= DEAD_TEMP_SECONDS:
                os.unlink(entry.path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True  # another user's process, or not ours to ask: leave its file
    return True
