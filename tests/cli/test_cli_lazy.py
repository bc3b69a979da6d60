"""The lazy command table: help always renders; an unimportable command explains itself."""

from __future__ import annotations

import click
from click.testing import CliRunner

from refold.cli.app import LazyGroup
from refold.cli.main import cli
from refold.errors import InvalidInput


def test_help_lists_every_command() -> None:
    for args in (["--help"], ["sessions", "--help"]):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 0, result.output
    listed = CliRunner().invoke(cli, ["--help"]).output
    for name in ("import", "search", "sessions", "doctor"):
        assert name in listed


def test_unimportable_command_is_a_stand_in() -> None:
    group = LazyGroup("g", lazy={"ghost": "refold.cli.no_such_module:cmd"})

    @group.command("real")
    def real() -> None:
        click.echo("real ran")

    runner = CliRunner()
    help_text = runner.invoke(group, ["--help"]).output
    assert "ghost" in help_text and "unavailable" in help_text
    assert runner.invoke(group, ["real"]).output == "real ran\n"
    result = runner.invoke(group, ["ghost", "--anything", "x"])
    assert isinstance(result.exception, InvalidInput)
    assert "refold.cli.no_such_module" in str(result.exception)


def test_help_imports_no_command_and_summaries_match_the_commands() -> None:
    """Issue 14 item 8: `refold --help` lists every command from its summary, without
    importing the command modules; the summaries are the commands' own short help."""
    import subprocess
    import sys

    from refold.cli.main import COMMANDS, SUMMARIES

    code = ("import sys; from refold.cli.main import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith('refold.cli.') "
            "and m not in ('refold.cli.main', 'refold.cli.app')), file=sys.stderr)\n"
            "print('pydantic' in sys.modules, 'rich' in sys.modules, file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.stderr.splitlines()[-2:] == ["[]", "False False"], proc.stderr
    ctx = click.Context(cli)
    assert sorted(SUMMARIES) == sorted(COMMANDS)  # every command is listed without an import
    for name, summary in SUMMARIES.items():
        command = cli.get_command(ctx, name)
        assert command is not None and name in COMMANDS
        assert command.get_short_help_str(200) == summary, name
