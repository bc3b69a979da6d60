"""Terminal control sequences in what `compact`, `memory show` and `skills show` print are
made visible (``refold.cli.terminal.safe_text``, as `sessions show` and `search` do), never
sent to the terminal raw; ``--json`` keeps the text exactly as stored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from refold.cli.main import cli

CLEAR = "\x1b[2J"  # clear the screen
TITLE = "\x1b]0;pwned\x07"  # set the window title


def run(home: Path, *args: str) -> Result:
    env: dict[str, str | None] = {"REFOLD_UPSTREAM": None, "REFOLD_SUMMARIZER_URL": None,
                                  "REFOLD_SUMMARIZER": None, "REFOLD_HOME": None,
                                  "REFOLD_DB": None}
    return CliRunner().invoke(cli, ["--home", str(home), *args], env=env,
                              catch_exceptions=False)


def ok(result: Result) -> str:
    assert result.exit_code == 0, result.output
    return result.output


def raw(text: str) -> bool:
    return "\x1b" in text or "\x07" in text


def test_compact_output_shows_escapes(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    rows = [{"role": "user", "content": f"hello {CLEAR} there"},
            {"role": "assistant", "content": f"done {TITLE} ok"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = ok(run(tmp_path / "h", "compact", str(path), "--context-length", "12000"))
    assert not raw(out), repr(out)
    assert "hello \\x1b[2J there" in out and "done \\x1b]0;pwned\\x07 ok" in out
    data = json.loads(ok(run(tmp_path / "h", "compact", str(path), "--context-length",
                             "12000", "--json")))
    assert data["messages"][0]["content"] == f"hello {CLEAR} there"  # JSON: as stored


def test_memory_entry_with_escapes_is_stored_and_shown_escaped(tmp_path: Path) -> None:
    """As skills: the entry is kept as given; what a person reads shows the escapes."""
    home = tmp_path / "h"
    added = ok(run(home, "memory", "add", f"note {CLEAR} x"))
    assert not raw(added), repr(added)
    shown = ok(run(home, "memory", "show"))
    assert not raw(shown), repr(shown)
    assert "note \\x1b[2J x" in shown
    snapshot = ok(run(home, "memory", "snapshot"))
    assert not raw(snapshot) and "note \\x1b[2J x" in snapshot
    entries = json.loads(ok(run(home, "memory", "show", "--json", "-t", "memory")))[0]
    assert entries["entries"][0]["text"] == f"note {CLEAR} x"


def test_skills_show_and_list_show_escapes(tmp_path: Path) -> None:
    home = tmp_path / "h"
    ok(run(home, "skills", "add", "esc", "-d", f"when {TITLE} asked",
           "--body", f"1. run it {CLEAR}\n2. check"))
    shown = ok(run(home, "skills", "show", "esc"))
    assert not raw(shown), repr(shown)
    assert "1. run it \\x1b[2J" in shown and "2. check" in shown  # newlines stay newlines
    listed = ok(run(home, "skills", "list"))
    assert not raw(listed) and "when \\x1b]0;pwned\\x07 asked" in listed
    data = json.loads(ok(run(home, "skills", "show", "esc", "--json")))
    assert CLEAR in data["body"]


@pytest.mark.parametrize("text", ["plain [bold]markup[/bold] stays text"])
def test_compact_output_still_escapes_markup(tmp_path: Path, text: str) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps([{"role": "user", "content": text}]), encoding="utf-8")
    out = ok(run(tmp_path / "h", "compact", str(path), "--context-length", "12000"))
    assert text in out
