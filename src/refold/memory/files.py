"""The file backend: MEMORY.md and USER.md in a memories directory, metadata in sidecars.

Layout of a memories directory::

    MEMORY.md  USER.md                  entries joined by "\\n§\\n" — nothing else in them
    .MEMORY.md.meta.json  (…USER…)      sha256 of the bytes refold last wrote, created/updated/
                                        last-used per entry (keyed by the entry's text hash)
    .MEMORY.md.lock  (…USER…)           a filelock per store
    pending.json, .pending.lock         staged writes awaiting approval
    MEMORY.md.bak.<UTC timestamp>       copies taken when an outside edit (drift) was found

Invariants:
- every file is replaced atomically (temp file in the same directory, fsync, ``os.replace``);
  a failed write removes its temp file, so none is ever left behind;
- the sidecar is written before the file and remembers the previous hash too, so a crash
  between the two writes is not mistaken for an outside edit;
- a memory file that is a symlink is refused (``StorageError``), never read or written through;
- drift = the file's bytes match neither hash the sidecar knows (or, with no sidecar, the file
  is not in canonical form); it stays flagged until ``adopt``.
- ``settled_load`` (reads: every session's snapshot) takes the lock only when the file or its
  sidecar changed since its last read, or had changed less than ``SETTLED_SECONDS`` before
  it: anything that writes a file (refold's atomic replace, an editor, a shell append, a
  rename) sets its ctime to the current time, so a file whose ctime is ``SETTLED_SECONDS``
  older than the last locked read and whose (lstat) identity, size, mtime and ctime are still
  the same has not changed since that read.
- a directory this process cannot write to (a read-only mount, another user's) is read
  without the lock, whose file it cannot create: atomic replaces mean each read sees a whole
  file, and a read is repeated until those stamps are the same before and after it, so the
  file and sidecar it returns are a pair. Writes there fail with a ``StorageError`` saying so.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import hashlib
import json
import logging
import math
import os
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import filelock

from refold.errors import StorageError
from refold.memory.actions import MemoryStore
from refold.memory.backend import Loaded
from refold.memory.entries import FILENAMES, check_target, parse_entries, render_entries
from refold.store.base import MemoryRow

log = logging.getLogger(__name__)

LOCK_TIMEOUT = 30.0
UNLOCKED_READ_TRIES = 20
# how long before a locked read the file and its sidecar must have last changed for that read
# to be reused without the lock (``settled_load``): far above the coarse clock's tick, which
# the kernel's file times follow
SETTLED_SECONDS = 1.0
_clock = time.time


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _text_key(text: str) -> str:
    return _sha(text.encode("utf-8"))[:16]


STALE_TEMP_SECONDS = 600.0  # a temp file this old is a killed writer's (writes take seconds)


def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically; never leaves a temp file behind (and removes
    the ones a writer killed mid-write left, once they are ``STALE_TEMP_SECONDS`` old)."""
    _sweep_temp(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _sweep_temp(path: Path) -> None:
    cutoff = time.time() - STALE_TEMP_SECONDS
    with contextlib.suppress(OSError):
        for stale in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
            with contextlib.suppress(OSError):
                if stale.is_file() and not stale.is_symlink() and stale.stat().st_mtime < cutoff:
                    stale.unlink()


def _refuse_symlink(path: Path) -> None:
    """A memory file goes into every system prompt: a symlink would put whatever file it
    points to there (and a write would replace the link), so it is refused, not followed."""
    if path.is_symlink():
        raise StorageError(f"memory file {path} is a symlink (to {os.readlink(path)}); refold "
                           "does not follow it",
                           hint="replace it with a regular file holding the entries")


class FileBackend:
    """``MemoryBackend`` over a directory of Markdown files."""

    def __init__(self, directory: str | os.PathLike[str], *,
                 lock_timeout: float = LOCK_TIMEOUT) -> None:
        self.directory = Path(directory).expanduser()
        self.lock_timeout = lock_timeout
        # per target: the last locked read's (file, sidecar) stamps and what it loaded
        self._settled: dict[str, tuple[tuple[Any, ...], Loaded]] = {}

    # -- paths ------------------------------------------------------------------------------
    def path(self, target: str) -> Path:
        return self.directory / FILENAMES[check_target(target)]

    def _meta_path(self, target: str) -> Path:
        return self.directory / f".{FILENAMES[target]}.meta.json"

    def location(self, target: str) -> str:
        return str(self.path(target))

    # -- locking ----------------------------------------------------------------------------
    @contextlib.contextmanager
    def _locked(self, name: str) -> Iterator[None]:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            lock = filelock.FileLock(str(self.directory / f".{name}.lock"),
                                     timeout=self.lock_timeout)
            with lock:
                yield
        except filelock.Timeout as exc:
            raise StorageError(f"memory file {name} is locked by another process",
                               hint="retry in a moment") from exc
        except OSError as exc:
            hint = None
            if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
                hint = ("memory can be read there but not changed; make the directory writable "
                        "or point the refold home elsewhere")
            raise StorageError(f"cannot use memories directory {self.directory}: {exc}",
                               hint=hint) from exc

    def transaction(self, target: str) -> contextlib.AbstractContextManager[None]:
        return self._locked(FILENAMES[check_target(target)])

    # -- entries ----------------------------------------------------------------------------
    def _read_bytes(self, path: Path) -> bytes | None:
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageError(f"cannot read {path}: {exc}") from exc

    def _read_meta(self, target: str) -> dict[str, Any] | None:
        raw = self._read_bytes(self._meta_path(target))
        if raw is None:
            return None
        try:
            meta = json.loads(raw)
        except ValueError:
            log.warning("ignoring unreadable memory sidecar %s", self._meta_path(target))
            return None
        return meta if isinstance(meta, dict) else None

    def settled_load(self, target: str) -> Loaded:
        """``load`` under the target's lock (a consistent file + sidecar pair) — or, when
        neither changed since the last such read and both had settled before it, what that
        read loaded (see the module doc): a session's snapshot costs two ``lstat`` calls
        instead of a lock and two reads."""
        name = FILENAMES[check_target(target)]
        if self.directory.is_dir() and not os.access(self.directory, os.W_OK):
            return self._unlocked_load(target)
        known = self._settled.get(target)
        if known is not None and self._stamp(target) == known[0]:
            return Loaded(rows=list(known[1].rows), version=known[1].version,
                          drift=known[1].drift)
        began = _clock()
        with self._locked(name):
            before = self._stamp(target)
            loaded = self.load(target)
            after = self._stamp(target)
        settled = before is not None and before == after and all(
            part is None or part[-1] < (began - SETTLED_SECONDS) * 1e9 for part in before[1:])
        if settled and before is not None:
            self._settled[target] = (before, Loaded(rows=list(loaded.rows),
                                                    version=loaded.version, drift=loaded.drift))
        else:
            self._settled.pop(target, None)
        return loaded

    def _unlocked_load(self, target: str) -> Loaded:
        """``load`` without the lock (see the module doc): retried while the stamps move, and
        after ``UNLOCKED_READ_TRIES`` the last read, whose worst case is a false drift flag."""
        for attempt in range(UNLOCKED_READ_TRIES):
            before = self._stamp(target)
            loaded = self.load(target)
            if before is not None and before == self._stamp(target):
                break
            time.sleep(0.001 * (attempt + 1))
        return loaded

    def _stamp(self, target: str) -> tuple[Any, ...] | None:
        """(the directory's identity, then per file — the memory file, its sidecar — None
        when missing, else its lstat identity, type, size, mtime and ctime); None when a
        stat fails otherwise."""
        try:
            directory = os.stat(self.directory)
        except OSError:
            return None
        parts: list[Any] = [(directory.st_dev, directory.st_ino)]
        for path in (self.path(target), self._meta_path(target)):
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                parts.append(None)
                continue
            except OSError:
                return None
            parts.append((st.st_dev, st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns,
                          st.st_ctime_ns))
        return tuple(parts)

    def load(self, target: str) -> Loaded:
        path = self.path(target)
        _refuse_symlink(path)
        raw = self._read_bytes(path)
        meta = self._read_meta(target) or {}
        text = (raw or b"").decode("utf-8", errors="replace")
        entries = parse_entries(text)
        known = meta.get("entries") or {}
        if not isinstance(known, Mapping):
            log.warning("ignoring malformed entry times in memory sidecar %s",
                        self._meta_path(target))
            known = {}
        try:
            fallback = path.stat().st_mtime if raw is not None else time.time()
        except OSError:  # removed between the read and the stat
            fallback = time.time()
        rows, malformed = [], False
        for entry in entries:
            key = _text_key(entry)
            row = self._row(entry, known.get(key))
            malformed |= row is None and key in known
            rows.append(row or MemoryRow(text=entry, created_at=fallback, updated_at=fallback))
        if malformed:
            log.warning("ignoring malformed entry times in memory sidecar %s",
                        self._meta_path(target))
        digest = _sha(raw) if raw is not None else None
        return Loaded(rows=rows, version=digest, drift=self._drifted(raw, text, meta))

    @staticmethod
    def _row(text: str, stamps: Any) -> MemoryRow | None:
        """The entry with its sidecar times, or None when it has none that make sense (a
        sidecar is a file a person may edit)."""
        if not isinstance(stamps, list) or len(stamps) not in (2, 3):  # 2: before last-used
            return None
        try:
            times = [float(stamp) for stamp in [*stamps, 0.0][:3]]
        except (TypeError, ValueError):
            return None
        if not all(math.isfinite(stamp) for stamp in times):
            return None
        return MemoryRow(text=text, created_at=times[0], updated_at=times[1],
                         last_used_at=times[2])

    @staticmethod
    def _drifted(raw: bytes | None, text: str, meta: Mapping[str, Any]) -> bool:
        if meta.get("drift"):
            return True
        if raw is None:
            return False  # deleted outside refold: nothing there to lose
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            return True  # rewriting would replace the undecodable bytes
        if "sha256" in meta:
            return _sha(raw) not in (meta.get("sha256"), meta.get("prev_sha256"))
        return render_entries(parse_entries(text)).strip() != text.strip()

    def save(self, target: str, rows: Sequence[MemoryRow], loaded: Loaded) -> None:
        data = render_entries([row.text for row in rows]).encode("utf-8")
        meta = {
            "sha256": _sha(data),
            "prev_sha256": loaded.version,
            "entries": {_text_key(r.text): [r.created_at, r.updated_at, r.last_used_at]
                        for r in rows},
        }
        if loaded.drift:
            meta["drift"] = True  # an add under drift keeps the flag until adopt
        self._write(self._meta_path(target), json.dumps(meta, indent=1).encode("utf-8"))
        self._write(self.path(target), data)

    def _write(self, path: Path, data: bytes) -> None:
        try:
            atomic_write(path, data)
        except OSError as exc:
            raise StorageError(f"cannot write {path}: {exc}") from exc

    # -- drift ------------------------------------------------------------------------------
    def backup(self, target: str) -> str | None:
        """Copy the current file to ``<name>.bak.<UTC timestamp>`` (reusing an identical one)."""
        path = self.path(target)
        raw = self._read_bytes(path)
        if raw is None:
            return None
        baks = sorted(path.parent.glob(f"{path.name}.bak.*"))
        if baks and self._read_bytes(baks[-1]) == raw:
            return str(baks[-1])
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        bak = path.with_name(f"{path.name}.bak.{stamp}")
        self._write(bak, raw)
        log.warning("memory file %s changed outside refold; copy kept at %s", path, bak)
        return str(bak)

    def adopt(self, target: str) -> None:
        loaded = self.load(target)
        self.save(target, loaded.rows, Loaded(rows=loaded.rows, version=loaded.version))

    # -- pending writes ---------------------------------------------------------------------
    def pending_transaction(self) -> contextlib.AbstractContextManager[None]:
        return self._locked("pending")

    def load_pending(self) -> list[dict[str, Any]]:
        raw = self._read_bytes(self.directory / "pending.json")
        if raw is None:
            return []
        try:
            items = json.loads(raw)
        except ValueError as exc:
            raise StorageError(f"{self.directory / 'pending.json'} is not valid JSON",
                               hint="fix or delete the file") from exc
        return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []

    def save_pending(self, items: Sequence[dict[str, Any]]) -> None:
        data = json.dumps(list(items), ensure_ascii=False, indent=1).encode("utf-8")
        self._write(self.directory / "pending.json", data)


def open_file_store(directory: str | os.PathLike[str], *,
                    limits: Mapping[str, int] | None = None) -> MemoryStore:
    """A ``MemoryStore`` over MEMORY.md / USER.md in ``directory`` (created on first write)."""
    return MemoryStore(FileBackend(directory), limits=limits)
