"""Which paths an ``@file`` / ``@folder`` reference may read.

A reference reads only inside its root (the working directory, or the directory
``serve --allow-local-refs`` names), judged on the fully resolved path, so ``../``, an absolute
path and a symlink that points out of the root are all refused the same way. Inside the root a
deny-list still applies: credentials and shell history under the user's home (``~/.ssh``,
``~/.aws``, ``~/.gnupg``, keychains, ``~/.netrc``, ``*_history``…), secret files by name
anywhere (``.env``, ``.env.*``, private keys), and refold's own data directory (other
sessions and memory are reachable only through ``@session`` and the tools, with their tenant
rules). The deny-list is checked on the path as typed and as resolved.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable
from pathlib import Path

from refold.errors import InvalidInput

SENSITIVE_HOME_DIRS = (
    ".ssh", ".aws", ".gnupg", ".kube", ".docker", ".azure", ".config/gh", ".config/gcloud",
    ".password-store", ".local/share/keyrings", "Library/Keychains", ".terraform.d", ".vault",
)
SENSITIVE_HOME_FILES = (
    ".netrc", ".pgpass", ".npmrc", ".pypirc", ".git-credentials", ".bash_history",
    ".zsh_history", ".sh_history", ".history", ".python_history", ".psql_history",
    ".mysql_history", ".sqlite_history", ".node_repl_history", ".lesshst", ".viminfo",
    ".bashrc", ".zshrc", ".profile", ".bash_profile", ".zprofile", ".config/fish/fish_history",
    ".local/share/fish/fish_history",
)
# secret files by name, wherever they are (matched against the file name, case-insensitive)
SENSITIVE_NAMES = (
    ".env", ".env.*", "*.pem", "*.key", "*.p12", "*.pfx", "*.keychain", "*.keychain-db",
    "id_rsa", "id_rsa.*", "id_dsa", "id_ecdsa", "id_ed25519", "id_ed25519.*", ".git-credentials",
    ".netrc", ".pgpass", "credentials", "*_history",
)


class PathRefused(InvalidInput):
    """A reference named a path it may not read (the message says why)."""


class PathGuard:
    """Resolves reference paths against ``root`` and refuses what must not be read."""

    def __init__(self, root: str | os.PathLike[str], *, home: str | os.PathLike[str] | None = None,
                 deny_roots: Iterable[str | os.PathLike[str]] = ()) -> None:
        self.root = Path(root).expanduser().resolve()
        self.home = Path(home).expanduser().resolve() if home is not None else Path.home()
        self.deny_roots = tuple(Path(p).expanduser().resolve() for p in deny_roots)

    def resolve(self, target: str) -> Path:
        """The absolute, symlink-free path of ``target``, or ``PathRefused``."""
        if not target or "\x00" in target:
            raise PathRefused("empty or malformed path")
        try:
            typed = Path(target).expanduser()
        except RuntimeError as exc:  # "~someone" for a user this machine does not know
            raise PathRefused(f"no such home directory in {target!r}") from exc
        lexical = typed if typed.is_absolute() else self.root / typed
        self._deny(Path(os.path.normpath(lexical)))
        resolved = lexical.resolve()
        if not resolved.is_relative_to(self.root):
            how = "via a symlink " if Path(os.path.normpath(lexical)).is_relative_to(self.root) \
                else ""
            raise PathRefused(f"refused: {how}outside the working directory {self.root}")
        self._deny(resolved)
        return resolved

    def allowed(self, path: Path) -> bool:
        """For folder listings: may ``path`` (already resolved) be shown?"""
        try:
            self._deny(path)
        except PathRefused:
            return False
        return path.is_relative_to(self.root)

    def _deny(self, path: Path) -> None:
        for root in self.deny_roots:
            if path.is_relative_to(root):
                raise PathRefused("refused: refold's own data directory")
        if path.is_relative_to(self.home):
            relative = path.relative_to(self.home).as_posix()
            for name in SENSITIVE_HOME_DIRS:
                if relative == name or relative.startswith(name + "/"):
                    raise PathRefused(f"refused: ~/{name} holds credentials")
            if relative in SENSITIVE_HOME_FILES:
                raise PathRefused(f"refused: ~/{relative} is a sensitive file")
        for part in path.parts:
            lowered = part.lower()
            if any(fnmatch.fnmatchcase(lowered, pattern) for pattern in SENSITIVE_NAMES):
                raise PathRefused(f"refused: {part} looks like a secret file")


__all__ = ["SENSITIVE_HOME_DIRS", "SENSITIVE_HOME_FILES", "SENSITIVE_NAMES", "PathGuard",
           "PathRefused"]
