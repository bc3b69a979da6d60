"""``refold``'s ``main()`` run in process as the console script runs it: its exit status and
what it printed (the CLI tests that need the real exit path, not click's runner)."""

from __future__ import annotations

import pytest

from refold.cli.main import main


def run_main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``refold ARGS``."""
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    out = capsys.readouterr()
    return int(exit_info.value.code or 0), out.out, out.err
