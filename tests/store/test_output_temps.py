"""An export killed mid-write (kill -9) left its temp file (``.out.jsonl.XXXX.tmp``, up to the
whole export) for ever; the next export to that path removes the temp files whose writer is
gone, and never a live writer's."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from refold.store.output import DEAD_TEMP_SECONDS, atomic_output


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_killed_writers_temp_file_is_swept_by_the_next_export(tmp_path: Path) -> None:
    target = tmp_path / "out.jsonl"
    old = time.time() - DEAD_TEMP_SECONDS - 5
    dead = tmp_path / f".out.jsonl.{_dead_pid()}.abc123.tmp"
    live = tmp_path / f".out.jsonl.{os.getppid()}.def456.tmp"  # a writer still running
    fresh = tmp_path / f".out.jsonl.{_dead_pid()}.ghi789.tmp"  # too new to judge
    other = tmp_path / f".other.jsonl.{_dead_pid()}.jkl012.tmp"  # another file's
    for path in (dead, live, fresh, other):
        path.write_text("partial")
    for path in (dead, live, other):
        os.utime(path, (old, old))
    with atomic_output(target) as out:
        out.write("done\n")
    assert target.read_text() == "done\n"
    assert not dead.exists()
    assert live.exists() and fresh.exists() and other.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")) == \
        sorted([live.name, fresh.name, other.name])  # and none of its own left behind
