"""`refold index`: the word-index bar ends finished when there is nothing to seal (it stood
at "0/1"), and Ctrl-C exits 130 as every other command does (it exited 0), after saying what
was done."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from refold.cli.main import cli


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pseudo-terminal")
@pytest.mark.timeout(120)
def test_word_index_bar_finishes_with_nothing_to_seal(tmp_path: Path) -> None:
    import pty

    (tmp_path / "home").mkdir()
    env = {**os.environ, "HOME": str(tmp_path), "REFOLD_HOME": str(tmp_path / "home"),
           "COLUMNS": "100"}
    env.pop("REFOLD_DB", None)
    pid, fd = pty.fork()  # the bar is drawn on a terminal only
    if pid == 0:  # pragma: no cover - the child
        try:
            os.execve(sys.executable, [sys.executable, "-m", "refold.cli.main", "index"], env)
        finally:
            os._exit(127)
    out = b""
    while True:
        try:
            data = os.read(fd, 4096)
        except OSError:
            break
        if not data:
            break
        out += data
    _, status = os.waitpid(pid, 0)
    text = out.decode("utf-8", "replace")
    assert os.waitstatus_to_exitcode(status) == 0, text
    renders = [part for part in text.split("\r") if "word index" in part]
    assert renders, text
    last = renders[-1]
    assert "-" not in last.split("[", 1)[1].split("]", 1)[0], text  # the bar is full
    assert "0/1" not in last, text


class _Embedder:
    model = "fake-model"


def test_ctrl_c_during_index_exits_130(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import refold.search.indexer as indexer
    import refold.search.vectors as vectors

    def backfill(store: Any, embedder: Any, *, batch: int, limit: int | None,
                 progress: Any) -> None:
        progress(3)  # one batch stored, then the user pressed Ctrl-C
        raise KeyboardInterrupt

    monkeypatch.setattr(vectors, "load_embedder", lambda: _Embedder())
    monkeypatch.setattr(indexer, "missing_count", lambda store, model: 10)
    monkeypatch.setattr(indexer, "backfill", backfill)
    env: dict[str, str | None] = {"REFOLD_HOME": None, "REFOLD_DB": None}
    for extra in ([], ["--json"]):
        result = CliRunner().invoke(cli, ["--home", str(tmp_path / "h"), "index", *extra],
                                    env=env)
        assert result.exit_code == 130, (result.output, result.exception)
        if extra:
            data = json.loads(result.stdout)
            assert data["interrupted"] and data["embedded"] == 3 and data["remaining"] == 7
        else:
            assert "interrupted" in result.output and "7 still missing" in result.output
