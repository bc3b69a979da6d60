"""`refold demo` runs to completion offline and leaves a real, inspectable demo home."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from refold.cli.demo_runner import scripted_replies
from refold.cli.demo_script import build_script
from refold.messages.model import content_text
from refold.store import open_store

pytestmark = pytest.mark.timeout(180)


def _run(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "REFOLD_HOME": str(home / "data"), "COLUMNS": "100"}
    return subprocess.run([sys.executable, "-m", "refold.cli.main", "demo", *args],
                          capture_output=True, text=True, env=env, timeout=170)


def test_a_cut_turn_label_says_so() -> None:
    """The turn labels were cut at 24 cells without a mark: "fix test_notifications.p"."""
    from refold.cli.demo import LABEL_CELLS, _fit_cells

    assert _fit_cells("fix test_notifications.py", LABEL_CELLS) == "fix test_notifications.…"
    assert _fit_cells("kick-off", LABEL_CELLS) == "kick-off" + " " * 16
    assert _fit_cells("中文：大文件流式写出与内存占用控制", LABEL_CELLS) == "中文：大文件流式写出与…" + " "
    assert _fit_cells("a" * LABEL_CELLS, LABEL_CELLS) == "a" * LABEL_CELLS


def test_script_is_realistic() -> None:
    turns = build_script()
    replies, outputs = scripted_replies(turns)
    messages = len(turns) + sum(1 + len(s.calls) for t in turns for s in t.steps)
    assert messages >= 250
    assert {t.phase for t in turns} == {"goal 1", "goal 2"}
    assert any("中文" in t.user for t in turns)
    assert max(len(o or "") for o in outputs.values()) > 4_000  # large tool outputs
    names = {c.name for t in turns for s in t.steps for c in s.calls}
    assert {"memory", "todo", "session_search", "terminal", "read_file"} <= names
    assert len(replies) == sum(len(t.steps) for t in turns)


def test_demo_runs_offline_and_leaves_its_home(tmp_path: Path) -> None:
    demo_home = tmp_path / "demo"
    proc = _run("--fast", "--home", str(demo_home), home=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert "compacted" in out and "search the archive" in out and "resume" in out
    assert f"demo home: {demo_home}" in out
    # the agent's session_search finds the earlier session (never its own rows)
    # (the question's words are ORed and ranked, so several earlier turns match)
    assert re.search(r"\b[1-9]\d* hits? in “acme-billing: staging setup”", out), out
    assert "Traceback" not in proc.stderr

    store = open_store(str(demo_home / "refold.db"))
    try:
        sessions = store.list_sessions(limit=5)
        assert len(sessions) == 2
        session = max(sessions, key=lambda s: s.message_count)
        assert session.message_count >= 250
        assert len(store.list_checkpoints(session.id)) >= 3
        # nothing was deleted: the very first user message is still in the ledger
        first = store.get_messages(session.id, limit=1)[0]
        assert "Python 3.12" in content_text(first.message)
        assert store.list_events(session.id, "todo")
    finally:
        store.close()
    memory = "".join(p.read_text(encoding="utf-8")
                     for p in (demo_home / "memories").glob("*.md"))
    assert "pytest -q" in memory and "用中文回答" in memory
    # the background review re-reads what the agent already saved: it leaves those out
    # (it used to add "Prefers pytest -q over verbose output." beside the agent's entry)
    from refold.memory.files import open_file_store
    from refold.memory.similarity import duplicate_pairs

    files = open_file_store(demo_home / "memories")
    for target in ("memory", "user"):
        texts = [entry.text for entry in files.read(target).entries]
        assert texts and duplicate_pairs(texts) == [], texts
    assert "near-duplicates left out" in out


def test_demo_refuses_a_home_with_data(tmp_path: Path) -> None:
    demo_home = tmp_path / "demo"
    demo_home.mkdir()
    (demo_home / "refold.db").write_bytes(b"")
    proc = _run("--fast", "--home", str(demo_home), home=tmp_path)
    assert proc.returncode == 2
    assert "empty directory" in proc.stderr


def test_demo_refuses_an_existing_home_without_a_database(tmp_path: Path) -> None:
    """A real home holds refold.toml (a postgresql:// db setting) and MEMORY.md but no
    refold.db: the demo must not overwrite the one or append to the other."""
    home = tmp_path / "real"
    (home / "memories").mkdir(parents=True)
    settings = 'db = "postgresql://127.0.0.1:5432/test"\n'
    (home / "refold.toml").write_text(settings, encoding="utf-8")
    (home / "memories" / "MEMORY.md").write_text("my notes\n", encoding="utf-8")
    proc = _run("--fast", "--home", str(home), home=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "not empty" in proc.stderr and "Traceback" not in proc.stderr
    assert (home / "refold.toml").read_text(encoding="utf-8") == settings
    assert (home / "memories" / "MEMORY.md").read_text(encoding="utf-8") == "my notes\n"
    assert sorted(p.name for p in home.iterdir()) == ["memories", "refold.toml"]


def test_demo_output_is_readable_without_a_terminal(tmp_path: Path) -> None:
    proc = _run("--fast", "--home", str(tmp_path / "demo"), home=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert out.count("goal 1 · fix the failing test suite") == 1  # one header per goal
    assert out.count("goal 2 ·") == 1
    assert out.count("compaction #") >= 3
    assert "\x1b[" not in out  # no escape codes when piped
