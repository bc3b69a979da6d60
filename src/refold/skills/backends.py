"""Where skills live: a directory of SKILL.md folders (the default), or the refold database.

File layout under ``<home>/skills``::

    <name>/SKILL.md (+ references/, templates/, scripts/)   what Claude Code / Hermes load
    .meta/<name>.json     sha256 of the SKILL.md refold last wrote (and the one before)
    .locks/<name>.lock    one filelock per skill; .locks/pending.lock for the queue
    .trash/<name>.<UTC>   a deleted skill's folder, kept (a delete is reversible by hand)
    .pending.json         staged writes awaiting approval

The same rules as MEMORY.md (``refold.memory.files``): every write is atomic (temp file, fsync,
rename: ``refold.memory.files.atomic_write``), the sidecar is written first, and a SKILL.md
whose bytes match neither known hash was edited outside refold (drift): a patch or delete is
refused until adopted. The database backend keeps each SKILL.md as one memory document
(profile ``skills:<profile>``, target = the skill name) with the store's compare-and-set
versions, for several hosts.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import filelock

from refold._records import dataclass
from refold.errors import InvalidInput, StorageError
from refold.memory.files import atomic_write
from refold.skills.format import check_name
from refold.store.base import MemoryRow, Store

log = logging.getLogger(__name__)
LOCK_TIMEOUT = 30.0
PENDING = "__pending__"  # not a valid skill name: never collides with one


@dataclass(frozen=True)
class Loaded:
    text: str | None  # None: no such skill
    version: str | int | None
    drift: bool = False


class SkillBackend(Protocol):
    def location(self, name: str) -> str: ...
    def transaction(self, name: str) -> contextlib.AbstractContextManager[None]: ...
    def load(self, name: str) -> Loaded: ...
    def save(self, name: str, text: str, loaded: Loaded) -> None: ...
    def delete(self, name: str, loaded: Loaded) -> str | None: ...
    def names(self) -> list[str]: ...
    def adopt(self, name: str) -> None: ...
    def load_pending(self) -> list[dict[str, Any]]: ...
    def save_pending(self, items: list[dict[str, Any]]) -> None: ...


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class FileSkills:
    """``SkillBackend`` over ``<home>/skills``."""

    def __init__(self, directory: str | os.PathLike[str], *,
                 lock_timeout: float = LOCK_TIMEOUT) -> None:
        self.directory = Path(directory).expanduser()
        self.lock_timeout = lock_timeout

    def location(self, name: str) -> str:
        return str(self._skill_md(name))

    def _skill_md(self, name: str) -> Path:
        return self.directory / check_name(name) / "SKILL.md"

    def _meta(self, name: str) -> Path:
        return self.directory / ".meta" / f"{name}.json"

    @contextlib.contextmanager
    def transaction(self, name: str) -> Iterator[None]:
        locks = self.directory / ".locks"
        lock = filelock.FileLock(str(locks / f"{name}.lock"), timeout=self.lock_timeout)
        try:  # a home refold cannot write (read-only, immutable): said, not a traceback
            locks.mkdir(parents=True, exist_ok=True)
            lock.acquire()
        except filelock.Timeout as exc:
            raise StorageError(f"skill {name} is locked by another process",
                               hint="retry in a moment") from exc
        except OSError as exc:
            raise StorageError(f"cannot write the skills library at {self.directory}: "
                               f"{exc.strerror or exc}",
                               hint="check its permissions, or use another --home / REFOLD_HOME"
                               ) from exc
        try:
            yield
        finally:
            lock.release()

    def load(self, name: str) -> Loaded:
        path = self._skill_md(name)
        if path.parent.is_symlink():
            raise InvalidInput(f"skill folder {path.parent} is a symlink; refold will not "
                               "write through it")
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return Loaded(None, None)
        except OSError as exc:
            raise StorageError(f"cannot read {path}: {exc}") from exc
        meta = self._read_meta(name)
        known = (meta.get("sha256"), meta.get("prev_sha256")) if meta else ()
        drift = bool(meta.get("drift")) if meta else True
        drift = drift or (bool(known) and _sha(raw) not in known)
        return Loaded(raw.decode("utf-8", "replace"), _sha(raw), drift)

    def _read_meta(self, name: str) -> dict[str, Any] | None:
        try:
            meta = json.loads(self._meta(name).read_bytes())
        except (OSError, ValueError):
            return None
        return meta if isinstance(meta, dict) else None

    def save(self, name: str, text: str, loaded: Loaded) -> None:
        data = text.encode("utf-8")
        path = self._skill_md(name)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._meta(name).parent.mkdir(parents=True, exist_ok=True)
            meta = {"sha256": _sha(data), "prev_sha256": loaded.version}
            atomic_write(self._meta(name), json.dumps(meta).encode("utf-8"))
            atomic_write(path, data)
        except OSError as exc:
            raise StorageError(f"cannot write {path}: {exc}") from exc

    def delete(self, name: str, loaded: Loaded) -> str | None:
        folder = self._skill_md(name).parent
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        trash = self.directory / ".trash" / f"{name}.{stamp}"
        try:
            trash.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(folder), str(trash))
            self._meta(name).unlink(missing_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot remove skill {name}: {exc}") from exc
        return str(trash)

    def names(self) -> list[str]:
        if not self.directory.is_dir():
            return []
        return sorted(p.parent.name for p in self.directory.glob("*/SKILL.md")
                      if not p.parent.name.startswith("."))

    def adopt(self, name: str) -> None:
        loaded = self.load(name)
        if loaded.text is not None:
            meta = {"sha256": loaded.version, "prev_sha256": None}
            atomic_write(self._meta(name), json.dumps(meta).encode("utf-8"))

    # -- the approval queue -----------------------------------------------------------------
    def load_pending(self) -> list[dict[str, Any]]:
        try:
            items = json.loads((self.directory / ".pending.json").read_bytes())
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            raise StorageError(f"{self.directory / '.pending.json'} is unreadable: {exc}",
                               hint="fix or delete the file") from exc
        return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []

    def save_pending(self, items: list[dict[str, Any]]) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            atomic_write(self.directory / ".pending.json",
                         json.dumps(items, ensure_ascii=False, indent=1).encode("utf-8"))
        except OSError as exc:
            raise StorageError(f"cannot write {self.directory / '.pending.json'}: "
                               f"{exc.strerror or exc}") from exc


class DBSkills:
    """``SkillBackend`` over a refold ``Store``: one memory document per skill."""

    def __init__(self, store: Store, profile: str = "default") -> None:
        self.store = store
        self.profile = f"skills:{profile}"

    def location(self, name: str) -> str:
        return f"database profile {self.profile!r}, skill {name}"

    def transaction(self, name: str) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()  # the store's versions are the compare-and-set

    def load(self, name: str) -> Loaded:
        rows, version = self.store.memory_load(self.profile, name)
        return Loaded(rows[0].text if rows else None, version)

    def save(self, name: str, text: str, loaded: Loaded) -> None:
        now = datetime.now(UTC).timestamp()
        self.store.memory_save(self.profile, name, [MemoryRow(text, now, now)],
                               int(loaded.version or 0))

    def delete(self, name: str, loaded: Loaded) -> str | None:
        self.store.memory_save(self.profile, name, [], int(loaded.version or 0))
        return None

    def names(self) -> list[str]:
        targets = [t for p, t in self.store.memory_documents() if p == self.profile]
        return sorted(t for t in targets if t != PENDING and self.load(t).text is not None)

    def adopt(self, name: str) -> None:
        return None  # nothing edits the database behind refold's back

    def load_pending(self) -> list[dict[str, Any]]:
        rows, _ = self.store.memory_load(self.profile, PENDING)
        return [json.loads(r.text) for r in rows]

    def save_pending(self, items: list[dict[str, Any]]) -> None:
        _, version = self.store.memory_load(self.profile, PENDING)
        now = datetime.now(UTC).timestamp()
        self.store.memory_save(self.profile, PENDING,
                               [MemoryRow(json.dumps(i, ensure_ascii=False), now, now)
                                for i in items], version)


__all__ = ["DBSkills", "FileSkills", "Loaded", "SkillBackend"]
