"""`refold memory flush` after a kill -9: what a session said before its process died reaches
memory (issue 13 item 7), once, with clear output and clear errors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

KILLED = textwrap.dedent("""
    import os, signal, sys
    from refold.runtime import Engine
    from refold.store.sqlite import SQLiteStore
    home = sys.argv[1]
    store = SQLiteStore(os.path.join(home, "refold.db"))
    engine = Engine(store, model="gpt-4o-mini", context_length=32_000,
                    memory_dir=os.path.join(home, "memories"))
    rt = engine.open_session(new=True, title="killed")
    rt.prepare([{"role": "user", "content": "Remember that the VPN drops at midnight."}],
               system_prompt="You are a test agent.")
    rt.record({"role": "assistant", "content": "noted"})
    os.kill(os.getpid(), signal.SIGKILL)
""")


def _refold(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFOLD_")}
    return subprocess.run([sys.executable, "-m", "refold.cli.main", "--home", str(home), *args],
                          capture_output=True, text=True, timeout=60, env=env)


def _memory(home: Path) -> str:
    return "".join(p.read_text(encoding="utf-8") for p in (home / "memories").glob("*.md"))


def test_memory_flush_after_a_kill(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    killed = subprocess.run([sys.executable, "-c", KILLED, str(home)], capture_output=True,
                            text=True, timeout=60)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert "VPN drops" not in _memory(home)  # it died before its end: nothing flushed

    waiting = _refold(home, "memory", "flush")  # the default: idle for 30 minutes
    assert waiting.returncode == 0, waiting.stderr
    assert "nothing to review" in waiting.stdout and "VPN drops" not in _memory(home)

    now = _refold(home, "memory", "flush", "--idle", "0", "--json")
    assert now.returncode == 0, now.stderr
    report = json.loads(now.stdout)
    assert "nothing" not in report  # (it said both "flushed" and "nothing to review")
    assert [(f["title"], f["saved"]) for f in report["flushed"]] == [("killed", 1)]
    assert "VPN drops at midnight" in _memory(home)

    again = _refold(home, "memory", "flush", "--idle", "0", "--json")
    assert again.returncode == 0 and '"flushed": []' in again.stdout
    one = _refold(home, "memory", "flush", "--session", "killed")
    assert one.returncode == 0 and "nothing new" in one.stdout
    assert _memory(home).count("VPN drops at midnight") == 1


def test_memory_flush_bad_input(tmp_path: Path) -> None:
    home = tmp_path / "home"
    bad = _refold(home, "memory", "flush", "--idle", "soon")
    assert bad.returncode == 2 and "is not an age" in bad.stderr
    assert "Traceback" not in bad.stderr
    missing = _refold(home, "memory", "flush", "--session", "nope")
    assert missing.returncode != 0 and missing.stderr.startswith("error:")
    off = _refold(home, "--set", "memory.enabled=false", "memory", "flush")
    assert off.returncode != 0 and "memory is off" in off.stderr

