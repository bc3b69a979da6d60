"""The per-invocation context of a ``refold`` command, and JSON output: no click here, so the
click-free path of ``refold search`` (``refold.cli.searching``) shares them with every command.
"""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from refold._records import dataclass, field
from refold.errors import NotFound

if TYPE_CHECKING:  # both load on first use: `refold --version` and `--help` never need them
    from refold.config import Settings
    from refold.store import Store

# commands that only work on sessions already stored, and doctor (which checks what is there):
# they never create a database
READ_COMMANDS = frozenset({"search", "sessions", "context", "doctor"})


@dataclass
class AppContext:
    """What every command gets through ``click.pass_obj``: settings and a lazily opened store."""

    flags: dict[str, Any] = field(default_factory=dict)
    sets: tuple[str, ...] = ()  # --set KEY=VALUE, above the environment, below flags
    command: str | None = None  # the command being run: read commands never create a database

    @cached_property
    def settings(self) -> Settings:
        from refold.config import load_settings

        return load_settings(self.flags, os.environ, sets=self.sets)

    @cached_property
    def store(self) -> Store:
        settings = self.settings
        self._check_exists(settings)
        from refold.assembly import open_configured_store

        # a read command with a mistyped ?schema= must not create that schema
        return open_configured_store(settings, create=self.command not in READ_COMMANDS)

    def _check_exists(self, settings: Settings) -> None:
        """A command that only reads existing sessions, given a SQLite path (``--db``,
        ``REFOLD_DB``) that does not exist, stops with an error instead of creating an empty
        database there (a typo would otherwise look like an empty archive)."""
        if settings.db is None or settings.db.startswith(("postgresql://", "postgres://")):
            return
        from refold.store import sqlite_file_of

        path = sqlite_file_of(settings.db)
        if path == ":memory:" or os.path.exists(path):
            return
        if self.command in READ_COMMANDS:
            raise NotFound(f"no database at {path}",
                           hint="check --db / REFOLD_DB; `refold import FILE` creates one")

    def protected_paths(self) -> list[Path]:
        """refold's own files, which no output option may overwrite: the SQLite database and
        its companions, the memory and skills directories (tenants' too) and the settings file."""
        settings = self.settings
        paths = [settings.memories_dir, settings.home / "skills", settings.home / "tenants",
                 settings.home / "refold.toml"]
        if "://" not in settings.db_url or settings.db_url.startswith("sqlite://"):
            from refold.store import sqlite_file_of
            from refold.store.output import sqlite_files

            database = sqlite_file_of(settings.db_url)
            if database != ":memory:":
                paths += sqlite_files(database)
        return paths

    def close(self) -> None:
        if "store" in self.__dict__:
            self.store.close()


def _default(value: Any) -> Any:
    from refold import _records as records

    if records.is_record(value) and not isinstance(value, type):
        return records.asdict(value)
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return str(value)


def to_json(value: Any) -> str:
    """JSON for ``--json`` output: dataclasses become objects, non-ASCII kept readable."""
    import json

    return json.dumps(value, default=_default, ensure_ascii=False, indent=2)


