"""``refold config show [--json]``: every effective setting, and where each one came from.

Sources, lowest first: ``default``, ``refold.toml`` (its path), ``env REFOLD_<NAME>``,
``flag --set KEY`` and the command's own flags. Secrets (API keys) are masked.

The text form is a valid ``refold.toml`` that gives the same settings back: each table's
settings by full name, values in TOML, the source as a comment. A value TOML cannot hold (an
unset one, shown as ``null``) or a masked one (a secret, a database URL's password) is printed
commented out, so reading the output back never sets a key to ``"***"``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from typing import Any

import click

from refold.cli.app import AppContext, emit, pass_app

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


@click.group("config")
def config_group() -> None:
    """Inspect refold's settings (refold.toml, REFOLD_* variables, --set)."""


def toml_value(value: Any) -> str:
    """``value`` as a TOML value (``None`` inside a table: the key is left out, as unset)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)  # finite: settings refuse inf and nan
    if isinstance(value, str):
        # JSON's escapes are TOML's; TOML also wants DEL escaped
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    if isinstance(value, dict):
        items = [f"{_toml_key(str(k))} = {toml_value(v)}" for k, v in value.items()
                 if v is not None]
        return "{" + ", ".join(items) + "}" if items else "{}"
    raise TypeError(f"no TOML form for {type(value).__name__}")


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else toml_value(key)


def _renderer(masked: frozenset[str]) -> Callable[[dict[str, Any]], None]:
    def render(value: dict[str, Any]) -> None:
        section = None
        width = max(len(row["name"]) for row in value["settings"])
        for row in value["settings"]:
            if row["section"] != section:
                section = row["section"]
                click.echo(f"[{section}]")
            unset = row["value"] is None
            shown = "null" if unset else toml_value(row["value"])
            lead = "# " if unset or row["name"] in masked else "  "
            click.echo(f"{lead}{row['name']:<{width}} = {shown}  # {row['source']}")
        for name in value["ignored_env"]:
            click.echo(f"warning: {name} names no setting and is ignored", err=True)
    return render


@config_group.command("show")
@click.option("--json", "as_json", is_flag=True, help="Print the settings as JSON.")
@pass_app
def show_cmd(app: AppContext, as_json: bool) -> None:
    """Print the effective settings and where each came from."""
    from refold.config import GENERAL, SECRET_SETTINGS, effective, unknown_env

    settings = app.settings
    rows = sorted(effective(settings), key=lambda r: (r["section"] != GENERAL, r["section"]))
    # shown otherwise than they are: API keys, a database URL's password
    masked = frozenset(r["name"] for r in rows if r["name"] in SECRET_SETTINGS | {"db"}
                       and r["value"] != settings.value_of(r["name"]))
    emit({"settings": rows, "ignored_env": unknown_env(os.environ)}, as_json,
         _renderer(masked))
