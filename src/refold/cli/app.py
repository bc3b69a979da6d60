"""Shared CLI plumbing: the lazy command group, the per-invocation context, and rendering.

Commands live in their own modules and are imported only when used (``LazyGroup``), so
``refold --help`` stays fast and a missing optional extra affects only its own command.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from refold.cli.context import AppContext, to_json
from refold.errors import InvalidInput

if TYPE_CHECKING:  # both load on first use: `refold --version` and `--help` never need them
    pass

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

    def resolve_command(self, ctx: click.Context, args: list[str]
                        ) -> tuple[str | None, click.Command | None, list[str]]:
        """A mistyped command names the close ones, lazy commands included (click looks only
        at ``self.commands``: ``refold serach`` got no "Did you mean 'search'?")."""
        name = args[0] if args else ""
        if name and not name.startswith("-") and not ctx.resilient_parsing \
                and self.get_command(ctx, name) is None:
            from difflib import get_close_matches

            close = get_close_matches(name, self.list_commands(ctx))
            hint = ("" if not close else f" Did you mean {close[0]!r}?" if len(close) == 1
                    else f" Did you mean one of {', '.join(map(repr, close))}?")
            ctx.fail(f"No such command {name!r}.{hint}")
        return super().resolve_command(ctx, args)

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


def require_extra(command: str, extra: str, *modules: str) -> None:
    """``InvalidInput`` naming the extra to install when one of ``modules`` cannot be imported
    (``refold serve`` after a plain ``pip install .`` was a ModuleNotFoundError traceback)."""
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError:
            raise InvalidInput(f"refold {command} needs the {extra} extra ({module} is not "
                               "installed)", hint=f"pip install 'refold[{extra}]'") from None


def _unavailable(name: str, exc: ImportError) -> click.Command:
    """A stand-in for a command whose module cannot be imported: it says why when run."""
    missing = exc.name or str(exc)

    def run(**_ignored: Any) -> None:
        raise InvalidInput(f"refold {name} is not available here: cannot import {missing}",
                           hint="install the extra it needs, e.g. pip install 'refold[all]'")

    return click.Command(name, callback=run, context_settings={"ignore_unknown_options": True},
                         params=[click.Argument(["args"], nargs=-1)], add_help_option=False,
                         short_help=f"(unavailable: cannot import {missing})")


pass_app = click.make_pass_decorator(AppContext)


def emit(value: Any, as_json: bool, render: Callable[[Any], None]) -> None:
    """Print ``value`` as JSON when ``as_json``, else hand it to ``render`` (a rich table etc)."""
    if as_json:
        click.echo(to_json(value))
    else:
        render(value)


PIPED_WIDTH = 4096  # a table's width when stdout is a pipe or a file (its natural width)


def console(*, piped_width: int | None = PIPED_WIDTH) -> Any:
    """A rich Console on stdout (imported lazily: rich is only needed for human output).
    A closed pipe (``refold … | head``) ends the command quietly with status 0, as for plain
    output (``main``), instead of rich's own exit with status 1.

    Written to a pipe or a file (and with no ``COLUMNS`` set), rich would lay tables out in 80
    columns: cells wrapped and cut, whole columns dropped (``refold sessions list > file`` lost
    its ``source`` column). There a table gets ``piped_width`` columns instead, which it does
    not fill: it keeps its natural width, one line per row. None: rich's own choice (the
    demo's full-width rules)."""
    from rich.console import Console

    class PipeConsole(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError("the reader of the output went away")

    width = None
    if piped_width is not None and not sys.stdout.isatty() and not os.environ.get("COLUMNS"):
        width = piped_width
    return PipeConsole(soft_wrap=False, highlight=False, width=width)


def err_console() -> Any:
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def stdin_is_tty() -> bool:
    return sys.stdin.isatty()
