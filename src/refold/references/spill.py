"""The spill store: whole texts too big for the window, kept on disk for the model to page.

An ``@session`` reference attaches a budgeted excerpt; the session's full projection goes here
and the excerpt names its spill id, which the ``session_search`` tool reads page by page
(``mode=spill``). Invariants:
- ids are random (``secrets.token_hex``) and a read accepts only that exact shape, so an id
  from a model can never name another path (no ``..``, no separators);
- the directory is created 0700 and every file 0600 (``O_EXCL``: never through a planted
  file or symlink), written whole before it becomes visible (temp name, then ``os.replace``);
- each tenant has its own directory, so one tenant's id never opens another's spill.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
from pathlib import Path

from refold._records import dataclass
from refold.errors import InvalidInput, NotFound, StorageError

_ID = re.compile(r"^[0-9a-f]{24}$")
_TENANT = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
PAGE_CHARS = 8000


@dataclass(frozen=True)
class SpillPage:
    spill_id: str
    offset: int
    text: str
    total_chars: int

    @property
    def next_offset(self) -> int | None:
        end = self.offset + len(self.text)
        return end if end < self.total_chars else None


class SpillStore:
    """Spilled texts under ``directory`` (e.g. ``<home>/spill``), one subdirectory per tenant."""

    def __init__(self, directory: str | os.PathLike[str], *, owner: str = "") -> None:
        name = owner or "local"
        if not _TENANT.match(name) or name in (".", ".."):
            raise InvalidInput("a spill tenant name may use letters, digits, '_', '.' and '-'")
        self.directory = Path(directory) / name

    def write(self, text: str) -> str:
        """Keep ``text``; its id."""
        spill_id = secrets.token_hex(12)
        try:
            self._ensure_dir()
            tmp = self.directory / f".{spill_id}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0),
                         0o600)
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(text.encode("utf-8"))
                os.replace(tmp, self.directory / f"{spill_id}.txt")
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        except OSError as exc:
            raise StorageError(f"cannot write the spill store {self.directory}: {exc}") from exc
        return spill_id

    def read(self, spill_id: str, *, offset: int = 0, limit: int = PAGE_CHARS) -> SpillPage:
        """A page of a spilled text (``NotFound`` for an id this tenant does not have)."""
        if not isinstance(spill_id, str) or not _ID.match(spill_id):
            raise InvalidInput("spill_id must be the 24-character id a reference named")
        try:
            text = (self.directory / f"{spill_id}.txt").read_text(encoding="utf-8")
        except FileNotFoundError as exc:
            raise NotFound(f"no spilled text {spill_id}",
                           hint="use the spill_id from a Referenced sessions block") from exc
        except OSError as exc:
            raise StorageError(f"cannot read spilled text {spill_id}: {exc}") from exc
        offset = max(0, min(offset, len(text)))
        return SpillPage(spill_id, offset, text[offset:offset + max(1, limit)], len(text))

    def _ensure_dir(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        if self.directory.is_symlink():
            raise OSError("the spill directory is a symlink")
        os.chmod(self.directory, 0o700)


__all__ = ["PAGE_CHARS", "SpillPage", "SpillStore"]
