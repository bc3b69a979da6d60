"""The local references: ``@file``, ``@folder``, ``@diff``, ``@staged``, ``@git`` and ``@url``.

Each resolves to one block of text or to a refusal (``InvalidInput`` with the reason); the
caller (``refold.references.expand``) applies the shared budget. Files are read through the
``FileReader`` seam (at most ``MAX_READ_BYTES``; a line range is looked for however far into
the file it is, and at most ``MAX_READ_BYTES`` of it kept), binary files are named, not
inlined, and folder listings skip what the path guard would refuse.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

from refold.errors import InvalidInput
from refold.messages.validate import repair_text
from refold.references.parse import Reference
from refold.references.paths import PathGuard
from refold.references.sources import (
    BINARY_SNIFF,
    MAX_READ_BYTES,
    FileReader,
    GitRunner,
    UrlFetcher,
    hardened_argv,
    looks_binary,
    read_lines,
)

MAX_LISTING = 200
_REV = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/~^@{}:+-]{0,199}$")
_FENCE = {".py": "python", ".js": "javascript", ".ts": "typescript", ".json": "json",
          ".md": "markdown", ".sh": "bash", ".yml": "yaml", ".yaml": "yaml", ".toml": "toml",
          ".rs": "rust", ".go": "go", ".sql": "sql", ".html": "html", ".css": "css"}


class LocalReferences:
    """Resolves local references under ``guard.root``."""

    def __init__(self, guard: PathGuard, files: FileReader, git: GitRunner,
                 url_fetcher: UrlFetcher | None = None) -> None:
        self.guard = guard
        self.files = files
        self.git = git
        self.url_fetcher = url_fetcher

    def resolve(self, ref: Reference) -> tuple[str, str]:
        """(label, body) of ``ref``; ``InvalidInput`` when it is refused or fails."""
        if ref.kind == "file":
            return self._file(ref)
        if ref.kind == "folder":
            return self._folder(ref)
        if ref.kind in ("diff", "staged"):
            options = ["--staged"] if ref.kind == "staged" else []
            return f"git diff {' '.join(options)}".strip(), self._git("diff", options, [])
        if ref.kind == "git":
            return self._revision(ref)
        if ref.kind == "url":
            return self._url(ref)
        raise InvalidInput(f"unsupported reference kind {ref.kind}")

    def _file(self, ref: Reference) -> tuple[str, str]:
        path = self.guard.resolve(ref.target)
        if not path.exists():
            raise InvalidInput("file not found")
        if not path.is_file():
            raise InvalidInput("not a file (use @folder: for a directory)")
        # a line range is read on its own: only the head is sniffed here
        data = self.files.read(path, MAX_READ_BYTES if ref.line_start is None else BINARY_SNIFF)
        if looks_binary(data):
            size = path.stat().st_size
            return str(path), f"(binary file, {size} bytes; not inlined)"
        if ref.line_start is not None:
            text = self._lines(path, ref.line_start, ref.line_end)
        else:
            text = data.decode("utf-8", "replace")
        fence = _FENCE.get(path.suffix.lower(), "")
        return str(path), f"```{fence}\n{text.rstrip(chr(10))}\n```"

    def _lines(self, path: Path, first: int, last: int | None) -> str:
        """Lines ``first``..``last`` of a text file (a line ends at a line feed; a carriage
        return before it is dropped), found however far in; a range that is not one is
        refused."""
        last = first if last is None else last
        if first < 1:
            raise InvalidInput(f"bad line range {first}-{last}: lines are numbered from 1")
        if last < first:
            raise InvalidInput(f"bad line range {first}-{last}: it ends before it starts")
        reader = getattr(self.files, "read_lines", None)
        if reader is not None:
            data, reached = reader(path, first, last, MAX_READ_BYTES)
        else:  # a FileReader seam without read_lines: the range within what read() gives
            whole = self.files.read(path, MAX_READ_BYTES)
            data, reached = read_lines(io.BytesIO(whole), first, last, MAX_READ_BYTES)
            if reached < first and len(whole) >= MAX_READ_BYTES:
                raise InvalidInput(f"line {first} is past the first {MAX_READ_BYTES} bytes "
                                   f"read ({reached} lines)")
        if reached < first:
            raise InvalidInput(f"line {first} is past the end ({reached} lines)")
        lines = data.decode("utf-8", "replace").split("\n")
        return "\n".join(line.removesuffix("\r") for line in lines)

    def _folder(self, ref: Reference) -> tuple[str, str]:
        path = self.guard.resolve(ref.target)
        if not path.is_dir():
            raise InvalidInput("folder not found" if not path.exists() else "not a folder")
        lines: list[str] = []
        hidden = 0
        for child in self.files.listing(path):
            resolved = child.resolve()
            if not self.guard.allowed(resolved):
                hidden += 1
                continue
            if len(lines) >= MAX_LISTING:
                lines.append("… (more entries not listed)")
                break
            # a name that is not UTF-8 comes as lone surrogates: U+FFFD, as `refold expand`
            # prints it (counted or stored as it was, it broke every turn of the session)
            name = repair_text(child.name)
            try:
                lines.append(f"{name}/" if child.is_dir() else
                             f"{name} ({child.stat().st_size} bytes)")
            except OSError:  # a dangling link (an editor's lock file), a file gone meanwhile
                lines.append(f"{name} (unreadable)")
        if hidden:
            lines.append(f"({hidden} entries withheld: sensitive or outside the directory)")
        return str(path), "\n".join(lines) or "(empty folder)"

    def _revision(self, ref: Reference) -> tuple[str, str]:
        target = ref.target or "HEAD"
        if target.isdigit():  # @git:3 — the last three commits with their patches
            count = max(1, min(int(target), 10))
            return f"git log -{count} -p", self._git("log", [f"-{count}", "-p"], [])
        if not _REV.match(target):
            raise InvalidInput("not a revision name (letters, digits and ._/~^@{}:+- only)")
        return f"git show {target}", self._git("show", ["--stat", "-p"], [target])

    def _git(self, command: str, options: list[str], operands: list[str]) -> str:
        out = self.git.run(hardened_argv(command, options, operands), self.guard.root)
        return f"```diff\n{out.strip() or '(no output)'}\n```"

    def _url(self, ref: Reference) -> tuple[str, str]:
        if self.url_fetcher is None:
            raise InvalidInput("refused: URL fetching is off (the caller did not enable it)")
        if not re.match(r"^https?://", ref.target, re.IGNORECASE):
            raise InvalidInput("only http:// and https:// URLs are fetched")
        text = str(self.url_fetcher(ref.target) or "").strip()
        if not text:
            raise InvalidInput("no content")
        return ref.target, text


__all__ = ["LocalReferences"]
