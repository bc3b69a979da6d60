"""Conformance: a session cannot be renamed to the start of another session's id (4+ hex
digits): the title would shadow that id prefix, and ``show``/``rm``/``rename`` by it would be
refused as ambiguous."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from refold.cli.main import cli
from refold.errors import InvalidInput
from refold.store import Store

SAMPLE = Path(__file__).resolve().parents[2] / "src" / "refold" / "data" / "sample_session.jsonl"


def test_a_title_that_starts_another_sessions_id_is_refused(store: Store) -> None:
    first, second = store.create_session(), store.create_session()
    prefix = second.id[:6]
    with pytest.raises(InvalidInput):
        store.rename_session(first.id, prefix)
    with pytest.raises(InvalidInput):
        store.rename_session(first.id, prefix.upper())
    assert store.get_session(first.id).title != prefix
    store.rename_session(second.id, prefix)  # its own id's start: no other session's
    store.rename_session(first.id, prefix + " notes")  # no id starts so
    assert store.get_session(first.id).title == prefix + " notes"


def test_fork_and_import_titles_that_start_an_id_are_refused(tmp_path: Path) -> None:
    """The CLI's ``fork --title`` and ``import --title`` refuse them as rename does (the probe
    gave a fork the title ``4f1eb4`` and ``show 4f1eb4`` was ambiguous from then on)."""
    home = tmp_path / "home"

    def run(*args: str) -> Any:
        return CliRunner().invoke(cli, ["--home", str(home), *args])

    made = run("import", str(SAMPLE), "--json")
    assert made.exit_code == 0, made.output
    sid = json.loads(made.stdout)["session_id"]
    forked = run("sessions", "fork", sid, "--title", sid[:6])
    assert isinstance(forked.exception, InvalidInput)
    assert "start of a session's id" in str(forked.exception)
    other = tmp_path / "other.jsonl"
    other.write_text('{"role": "user", "content": "another conversation"}\n')
    imported = run("import", str(other), "--title", sid[:10])
    assert isinstance(imported.exception, InvalidInput)
    assert "start of a session's id" in str(imported.exception)
    assert run("sessions", "fork", sid, "--title", sid[:6] + " notes").exit_code == 0
