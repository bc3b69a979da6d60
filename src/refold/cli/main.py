"""The ``refold`` command's entry point, and the one place errors render.

Every user-facing failure becomes one line on stderr: exit 2 for usage and bad input, 1 for
everything else. A traceback means a bug in refold; ``REFOLD_DEBUG=1`` shows it for bug reports.
Output that cannot be written is such a failure too: a closed pipe (``refold … | head``) ends
the command quietly with status 0, any other error writing stdout (a full disk, an I/O error)
is ``error: cannot write to standard output: …`` and status 1. To tell those apart from an
``OSError`` of the command's own, stdout is wrapped for the run (``_GuardedStdout``).

Two command lines run without click, whose import is a third of a small search's start-up:
``refold --version`` and a plain ``refold search`` (``refold.cli.searching.fast_search``). Every
other command line, and any search it cannot parse exactly, goes to the click group in
``refold.cli.commands``, so help and usage errors are click's.
"""

from __future__ import annotations

import os
import sys
from typing import Any, NoReturn, TextIO

from refold import __version__
from refold.errors import RefoldError


class StdoutFailed(Exception):
    """Writing standard output failed with an error other than a closed pipe. Neither a
    ``RefoldError`` nor an ``OSError``, so no command's own handler takes it for its error
    (``refold chat`` would carry on, ``sessions export -o`` would name its file): it ends the
    run in ``main``."""

    exit_code = 1

    def __init__(self, exc: OSError) -> None:
        super().__init__(f"cannot write to standard output: {exc.strerror or exc}")


class _GuardedStdout:
    """``sys.stdout`` for the run: a write or flush that fails (except ``BrokenPipeError``,
    handled as before) raises ``StdoutFailed`` instead of an ``OSError`` that could come from
    anywhere. Everything else is the wrapped stream's."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise StdoutFailed(exc) from exc

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise StdoutFailed(exc) from exc

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def __getattr__(name: str) -> Any:  # the group and its tables, for tests and tools that read them
    if name in ("cli", "COMMANDS", "SUMMARIES"):
        from refold.cli import commands

        return getattr(commands, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI and render errors in exactly one place."""
    args = sys.argv[1:] if argv is None else list(argv)
    stdout = sys.stdout
    sys.stdout = _GuardedStdout(stdout)
    try:
        _main(args)
    finally:
        if isinstance(sys.stdout, _GuardedStdout):  # click may have wrapped it on EPIPE
            sys.stdout = stdout


def _main(args: list[str]) -> None:
    try:
        status = _run(args)
    except StdoutFailed as exc:
        _stdout_failed(exc)
    except RefoldError as exc:
        if os.environ.get("REFOLD_DEBUG"):
            raise
        _error(f"error: {exc}")
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        _error("interrupted")
        sys.exit(130)
    except BrokenPipeError:
        _silence_stdout()
        sys.exit(0)
    except SystemExit:
        if _pipe_closed():  # click met EPIPE writing output, wrapped stdout and exits 1
            _silence_stdout()
            sys.exit(0)
        _flush_stdout()
        raise
    _flush_stdout()
    sys.exit(status)


def _flush_stdout() -> None:
    """Flush stdout here, not at the interpreter's exit, where a failure could only be ignored
    (``Exception ignored …`` and status 120)."""
    try:
        if not sys.stdout.closed:  # `refold mcp`: the mcp package closed it on the way out
            sys.stdout.flush()
    except BrokenPipeError:  # `refold … | head` closed the pipe: not an error
        _silence_stdout()
    except StdoutFailed as exc:
        _stdout_failed(exc)


def _stdout_failed(exc: StdoutFailed) -> NoReturn:
    if os.environ.get("REFOLD_DEBUG"):
        raise exc
    _silence_stdout()  # what is still buffered must not fail again at the interpreter's exit
    _error(f"error: {exc}")
    sys.exit(exc.exit_code)


def _run(args: list[str]) -> int:
    """Run one command line; its exit status."""
    if args == ["--version"]:
        sys.stdout.write(f"refold, version {__version__}\n")  # what click's version option says
        return 0
    if "search" in args:
        from refold.cli.searching import fast_search

        fast = fast_search(args)
        if fast is not None:
            fast()
            return 0
    return _run_click(args)


def _run_click(args: list[str]) -> int:
    import click

    from refold.cli.commands import cli

    try:
        status = cli.main(args=args, prog_name="refold", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 130
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        exc.show()
        return 2 if isinstance(exc, click.UsageError) else exc.exit_code
    # outside standalone mode click *returns* the code of ctx.exit(N) instead of exiting
    return status if type(status) is int else 0


def _error(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _pipe_closed() -> bool:
    """Did click catch EPIPE (the reader of ``refold … | head`` left)? It then swaps stdout
    for its flush-pacifying wrapper (``_PacifyFlushWrapper``; ``PacifyFlushWrapper`` before
    click 8.2)."""
    utils = sys.modules.get("click.utils")
    if utils is None:
        return False
    wrapper = getattr(utils, "_PacifyFlushWrapper", None) \
        or getattr(utils, "PacifyFlushWrapper", None)
    return isinstance(wrapper, type) and isinstance(sys.stdout, wrapper)


def _silence_stdout() -> None:
    # Point stdout at /dev/null so the interpreter's final flush cannot raise again.
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (a test's capture): nothing to do
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


if __name__ == "__main__":
    main()
