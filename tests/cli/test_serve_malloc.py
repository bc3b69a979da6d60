"""`refold serve` caps glibc's malloc arenas: with one arena per allocating thread, a proxy's
threads kept its RSS growing (+1.5 MiB per 1,000 new conversations; with 2 arenas +0.4:
bench/bench_serve_memory.py). 0, or MALLOC_ARENA_MAX in the environment, leaves glibc alone."""

from __future__ import annotations

import os
import sys

import pytest

from refold.cli.serve import limit_malloc_arenas
from refold.config import load_settings


def test_the_cap_applies_on_glibc_unless_told_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    if not sys.platform.startswith("linux") or not os.confstr("CS_GNU_LIBC_VERSION"):
        pytest.skip("mallopt is glibc's: this machine has another C library")
    assert limit_malloc_arenas(0) is False
    assert limit_malloc_arenas(16) is True  # glibc's own default on a 2-core machine
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert limit_malloc_arenas(2) is False


def test_the_cap_is_a_setting(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REFOLD_SERVE_MALLOC_ARENAS", "0")
    assert load_settings({"home": str(tmp_path)}, os.environ).serve_malloc_arenas == 0
    assert load_settings({"home": str(tmp_path)}, {}).serve_malloc_arenas == 2
    with pytest.raises(Exception, match="serve_malloc_arenas"):
        load_settings({"home": str(tmp_path)}, {}, sets=("serve.malloc_arenas=-1",))
