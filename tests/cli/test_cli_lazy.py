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
