"""`refold demo` reports the resumed session's frozen snapshot in its own figures (it said
"3 entries (0 chars)": the current memory's count beside the snapshot's length) and the
ledger's true message count after the resume turn (it said 300 where 302 were stored)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from refold.cli.demo import _snapshot_lines, snapshot_entries
from refold.store import open_store

pytestmark = pytest.mark.timeout(180)


def test_snapshot_figures_are_the_snapshots_own() -> None:
    text = ("<env_memory>\nMEMORY (your personal notes) [1% — 9/2,200 chars]\none\n§\ntwo\n"
            "</env_memory>\n\n<user_profile>\nUSER PROFILE (who the user is) [0% — 5/1,375 "
            "chars]\nthree\nlines\n</user_profile>")
    assert snapshot_entries(text) == 3 and snapshot_entries("") == 0
    assert _snapshot_lines("", 3) == [
        "  memory snapshot, frozen at the session's start: 0 entries (0 chars)",
        "  memory holds 3 entries now: new sessions get them (this one keeps its snapshot)"]
    assert _snapshot_lines(text, 3) == [
        f"  memory snapshot, frozen at the session's start: 3 entries ({len(text)} chars)"]


def test_demo_resume_and_summary_figures_are_true(tmp_path: Path) -> None:
    demo_home = tmp_path / "demo"
    env = {**os.environ, "REFOLD_HOME": str(tmp_path / "data"), "COLUMNS": "100"}
    proc = subprocess.run([sys.executable, "-m", "refold.cli.main", "demo", "--fast",
                           "--home", str(demo_home)], capture_output=True, text=True, env=env,
                          timeout=170)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    found = re.search(r"memory snapshot, frozen at the session's start: (\d+) entr(?:y|ies) "
                      r"\(([\d,]+) chars\)", out)
    assert found, out
    entries, chars = int(found.group(1)), int(found.group(2).replace(",", ""))
    assert (entries == 0) == (chars == 0), found.group(0)  # never "3 entries (0 chars)"
    store = open_store(str(demo_home / "refold.db"))
    try:
        session = max(store.list_sessions(limit=5), key=lambda s: s.message_count)
        count = session.message_count
        frozen = store.list_events(session.id, "memory_snapshot")
    finally:
        store.close()
    assert frozen and snapshot_entries(str(frozen[0].payload.get("text") or "")) == entries
    ledger = re.search(r"messages in the ledger \(none deleted\)\s+([\d,]+)", out)
    assert ledger and int(ledger.group(1).replace(",", "")) == count, (ledger, count)
