"""Shared CLI plumbing: the lazy command group, the per-invocation context, and rendering.

Commands live in their own modules and are imported only when used (``LazyGroup``), so
``refold --help`` stays fast and a missing optional extra affects only its own command.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from refold.errors import InvalidInput, NotFound

if TYPE_CHECKING:  # both load on first use: `refold --version` and `--help` never need them
    from refold.config import Settings
    from refold.store import Store

# commands that only work on sessions already stored: they never create a database
READ_COMMANDS = frozenset({"search", "sessions", "context"})


class LazyGroup(click.Group):
    """A click group whose subcommands are ``"module:attribute"`` strings, imported on use."""

    def __init__(self, *args: Any, lazy: dict[str, str] | None = None,
                 summaries: dict[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})
        # one-line help per lazy command, so `--help` lists them without importing each one
        # (a test keeps these equal to the commands' own short help)
        self.summaries = dict(summaries or {})

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            if name in self.summaries and name not in self.commands:
                rows.append((name, self.summaries[name]))
                continue
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(formatter.width)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self.lazy))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy:
            module_name, attr = self.lazy[cmd_name].split(":")
            try:
                command = getattr(importlib.import_module(module_name), attr)
            except ImportError as exc:  # a missing extra must not break `refold --help`
                return _unavailable(cmd_name, exc)
            if not isinstance(command, click.Command):
                raise TypeError(f"{self.lazy[cmd_name]} is not a click command")
            return command
        return super().get_command(ctx, cmd_name)


def _unavailable(name: str, exc: ImportError) -> click.Command:
    """A stand-in for a command whose module cannot be imported: it says why when run."""
    missing = exc.name or str(exc)

    def run(**_ignored: Any) -> None:
        raise InvalidInput(f"refold {name} is not available here: cannot import {missing}",
                           hint="install the extra it needs, e.g. pip install 'refold[all]'")

    return click.Command(name, callback=run, context_settings={"ignore_unknown_options": True},
                         params=[click.Argument(["args"], nargs=-1)], add_help_option=False,
                         short_help=f"(unavailable: cannot import {missing})")


@dataclass
class AppContext:
    """What every command gets through ``click.pass_obj``: settings and a lazily opened store."""

    flags: dict[str, Any] = field(default_factory=dict)
    sets: tuple[str, ...] = ()  # --set KEY=VALUE, above the environment, below flags

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
        return open_configured_store(settings, create=_invoked_command() not in READ_COMMANDS)

    @staticmethod
    def _check_exists(settings: Settings) -> None:
        """A command that only reads existing sessions, given a SQLite path (``--db``,
        ``REFOLD_DB``) that does not exist, stops with an error instead of creating an empty
        database there (a typo would otherwise look like an empty archive)."""
        if settings.db is None or settings.db.startswith(("postgresql://", "postgres://")):
            return
        from refold.store import sqlite_file_of

        path = sqlite_file_of(settings.db)
        if path == ":memory:" or os.path.exists(path):
            return
        if _invoked_command() in READ_COMMANDS:
            raise NotFound(f"no database at {path}",
                           hint="check --db / REFOLD_DB; `refold import FILE` creates one")

    def protected_paths(self) -> list[Path]:
        """refold's own files, which no output option may overwrite: the SQLite database and
        its companions, the memory directory and the settings file."""
        settings = self.settings
        paths = [settings.memories_dir, settings.home / "refold.toml"]
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


def _invoked_command() -> str | None:
    ctx = click.get_current_context(silent=True)
    return ctx.find_root().invoked_subcommand if ctx is not None else None


pass_app = click.make_pass_decorator(AppContext)


def _default(value: Any) -> Any:
    import dataclasses

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return str(value)


def to_json(value: Any) -> str:
    """JSON for ``--json`` output: dataclasses become objects, non-ASCII kept readable."""
    import json

    return json.dumps(value, default=_default, ensure_ascii=False, indent=2)


def emit(value: Any, as_json: bool, render: Callable[[Any], None]) -> None:
    """Print ``value`` as JSON when ``as_json``, else hand it to ``render`` (a rich table etc)."""
    if as_json:
        click.echo(to_json(value))
    else:
        render(value)


def console() -> Any:
    """A rich Console on stdout (imported lazily: rich is only needed for human output).
    A closed pipe (``refold … | head``) ends the command quietly with status 0, as for plain
    output (``main``), instead of rich's own exit with status 1."""
    from rich.console import Console

    class PipeConsole(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError("the reader of the output went away")

    return PipeConsole(soft_wrap=False, highlight=False)


def err_console() -> Any:
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def stdin_is_tty() -> bool:
    return sys.stdin.isatty()
