"""Fixtures of the export and import tests: two CLI homes (``import_cli.cli_on_home``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from import_cli import Run, cli_on_home


@pytest.fixture
def origin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Run:
    """A home an export is made in."""
    (tmp_path / "a").mkdir()
    return cli_on_home(tmp_path / "a", monkeypatch)


@pytest.fixture
def other(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Run:
    """Another home, the export imported into it."""
    (tmp_path / "b").mkdir()
    return cli_on_home(tmp_path / "b", monkeypatch)
