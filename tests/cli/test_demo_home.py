"""``refold demo`` writes into the home given on refold's command line (``refold --home DIR
demo``; it ignored it) when the demo's own ``--home`` is not given, and still refuses one that
holds anything; ``REFOLD_HOME`` names the user's own archive: the demo stays out of it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(180)


def _refold(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("REFOLD_HOME", "REFOLD_DB")}
    return subprocess.run([sys.executable, "-m", "refold.cli.main", *args], capture_output=True,
                          text=True, env={**clean, "COLUMNS": "100", **env}, timeout=170)


def test_demo_uses_the_global_home(tmp_path: Path) -> None:
    home = tmp_path / "d14"
    proc = _refold("--home", str(home), "demo", "--fast", env={})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"demo home: {home}\n" in proc.stdout
    assert (home / "refold.db").is_file() and (home / "refold.toml").is_file()


def test_demo_stays_out_of_refold_home(tmp_path: Path) -> None:
    home = tmp_path / "real"
    (home / "memories").mkdir(parents=True)
    (home / "memories" / "MEMORY.md").write_text("my notes\n", encoding="utf-8")
    proc = _refold("demo", "--fast", env={"REFOLD_HOME": str(home)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"demo home: {home}" not in proc.stdout and "demo home: " in proc.stdout
    assert sorted(p.name for p in home.iterdir()) == ["memories"]


def test_the_demos_own_home_wins(tmp_path: Path) -> None:
    own = tmp_path / "own"
    proc = _refold("--home", str(tmp_path / "global"), "demo", "--fast", "--home", str(own),
                   env={"REFOLD_HOME": str(tmp_path / "env")})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"demo home: {own}\n" in proc.stdout
    assert (own / "refold.db").is_file()
    assert not (tmp_path / "global").exists() and not (tmp_path / "env").exists()


def test_demo_refuses_a_global_home_with_data(tmp_path: Path) -> None:
    home = tmp_path / "real"
    (home / "memories").mkdir(parents=True)
    (home / "memories" / "MEMORY.md").write_text("my notes\n", encoding="utf-8")
    proc = _refold("--home", str(home), "demo", "--fast", env={})
    assert proc.returncode == 2, proc.stdout[-2000:]
    assert f"{home} is not empty" in proc.stderr and "Traceback" not in proc.stderr
    assert sorted(p.name for p in home.iterdir()) == ["memories"]
    assert (home / "memories" / "MEMORY.md").read_text(encoding="utf-8") == "my notes\n"
