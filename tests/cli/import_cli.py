"""What the ``refold import`` tests of agent databases share: the CLI on a fresh home under
``tmp_path``, its JSON output, and the messages it stored (``conftest``'s ``origin`` and
``other``: two homes, for an export from one imported into the other)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from refold.cli.main import cli
from refold.store.base import StoredMessage
from refold.store.sqlite import SQLiteStore

Run = Callable[..., Result]
# a Claude Code transcript the package ships (36 messages), what the export tests import
SAMPLE = Path(__file__).resolve().parents[2] / "src" / "refold" / "data" / "sample_session.jsonl"


def cli_on_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Run:
    """``refold --home tmp_path/home ARGS…``, with no REFOLD_HOME or REFOLD_DB leaking in."""
    for name in ("REFOLD_HOME", "REFOLD_DB"):
        monkeypatch.delenv(name, raising=False)

    def invoke(*args: str) -> Result:
        return CliRunner().invoke(cli, ["--home", str(tmp_path / "home"), *args])
    return invoke


def ok_json(result: Result) -> Any:
    assert result.exit_code == 0, (result.output, result.exception)
    return json.loads(result.stdout)


def stored_messages(tmp_path: Path, session_id: str) -> list[StoredMessage]:
    """Every message the home's database holds for a session, in order."""
    store = SQLiteStore(str(tmp_path / "home" / "refold.db"))
    try:
        return store.get_messages(session_id)
    finally:
        store.close()
