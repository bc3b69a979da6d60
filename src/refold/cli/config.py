"""``refold config show [--json]``: every effective setting, and where each one came from.

Sources, lowest first: ``default``, ``refold.toml`` (its path), ``env REFOLD_<NAME>``,
``flag --set KEY`` and the command's own flags. Secrets (API keys) are masked.
"""

from __future__ import annotations

import json
import os
from typing import Any

import click

from refold.cli.app import AppContext, emit, pass_app


@click.group("config")
def config_group() -> None:
    """Inspect refold's settings (refold.toml, REFOLD_* variables, --set)."""


def _render(value: dict[str, Any]) -> None:
    section = None
    width = max(len(row["name"]) for row in value["settings"])
    for row in value["settings"]:
        if row["section"] != section:
            section = row["section"]
            click.echo(f"[{section}]")
        shown = json.dumps(row["value"], ensure_ascii=False)
        click.echo(f"  {row['name']:<{width}} = {shown}  # {row['source']}")
    for name in value["ignored_env"]:
        click.echo(f"warning: {name} names no setting and is ignored", err=True)


@config_group.command("show")
@click.option("--json", "as_json", is_flag=True, help="Print the settings as JSON.")
@pass_app
def show_cmd(app: AppContext, as_json: bool) -> None:
    """Print the effective settings and where each came from."""
    from refold.config import effective, unknown_env

    rows = sorted(effective(app.settings), key=lambda r: (r["section"] != "general",
                                                          r["section"]))
    emit({"settings": rows, "ignored_env": unknown_env(os.environ)}, as_json, _render)
