"""``refold expand``: show what refold would send for a message with ``@`` references.

For debugging and for agents written in other languages: the expanded message on stdout, each
warning (what was refused or cut, and why) on stderr — or all of it as one JSON object.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from refold.cli.app import AppContext, pass_app, to_json
from refold.errors import InvalidInput


@click.command("expand")
@click.argument("text")
@click.option("--cwd", "cwd", type=click.Path(file_okay=False, exists=True),
              help="Directory @file/@folder/@diff/@git read from (default: the current one).")
@click.option("--context-length", type=click.IntRange(256), default=None,
              help="The window the budgets are shares of (default: the context_length setting).")
@click.option("--json", "as_json", is_flag=True, help="Print the expansion as JSON.")
@pass_app
def expand_cmd(app: AppContext, text: str, cwd: str | None, context_length: int | None,
               as_json: bool) -> None:
    """Expand the @session/@file/@folder/@diff/@staged/@git references in TEXT ('-': stdin)."""
    from refold.references import local_expander, parse_references

    if text == "-":
        text = sys.stdin.read()
    if not text.strip():
        raise InvalidInput("nothing to expand: TEXT is empty")
    settings = app.settings
    wants_sessions = any(r.kind == "session" for r in parse_references(text))
    expander = local_expander(
        store=app.store if wants_sessions else None, cwd=Path(cwd or "."),
        spill_dir=settings.home / "spill", deny_roots=[settings.home])
    expansion = expander.expand(text, context_length=context_length or settings.context_length)
    if as_json:
        click.echo(to_json(expansion.to_dict()))
        return
    click.echo(expansion.message)
    for warning in expansion.warnings:
        click.echo(f"warning: {warning}", err=True)
