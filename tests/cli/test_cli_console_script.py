"""The installed ``refold`` console script: exit codes and one-line errors, never a traceback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SAMPLE = Path(__file__).resolve().parents[2] / "src" / "refold" / "data" / "sample_session.jsonl"


def refold_exe() -> str:
    beside = Path(sys.executable).parent / "refold"
    found = str(beside) if beside.exists() else shutil.which("refold")
    assert found, "the refold console script is not installed (pip install -e .)"
    return found


@pytest.fixture
def refold(tmp_path: Path):  # type: ignore[no-untyped-def]
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFOLD_")}
    env["REFOLD_HOME"] = str(tmp_path / "home")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([refold_exe(), *args], capture_output=True, text=True, env=env,
                              timeout=60, cwd=tmp_path, check=False)
    return run


def assert_one_line_error(proc: subprocess.CompletedProcess[str], code: int, *words: str) -> None:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for word in words:
        assert word in lines[0]


def test_import_and_search_succeed(refold) -> None:  # type: ignore[no-untyped-def]
    imported = refold("import", str(SAMPLE), "--json")
    assert imported.returncode == 0, imported.stderr
    assert json.loads(imported.stdout)["appended"] == 36
    found = refold("search", "ROUND_HALF_UP", "--json")
    assert found.returncode == 0 and json.loads(found.stdout)


def test_missing_file(refold) -> None:  # type: ignore[no-untyped-def]
    assert_one_line_error(refold("import", "nope.jsonl"), 2, "error:", "no such file",
                          "nope.jsonl")


def test_malformed_json_line(refold, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "broken.jsonl"
    bad.write_text('{"role": "user", "content": "a"}\n{"role": "assistant", "content": "b"}\n'
                   '{"role": "user", "content": \n', encoding="utf-8")
    assert_one_line_error(refold("import", str(bad)), 2, "error:", "broken.jsonl line 3",
                          "not valid JSON")
    invalid = tmp_path / "invalid.json"
    invalid.write_text('[{"role": "user", "content": "a"}, {"role": "wizard", "content": "b"}]',
                       encoding="utf-8")
    assert_one_line_error(refold("import", str(invalid)), 2, "message 1", "field 'role'")
    assert json.loads(refold("sessions", "list", "--json").stdout) == []


def test_unknown_session(refold) -> None:  # type: ignore[no-untyped-def]
    assert_one_line_error(refold("sessions", "show", "does-not-exist"), 1, "error:",
                          "does-not-exist")
    assert_one_line_error(refold("search", "x", "--session", "nope"), 1, "error:")


def test_bad_search_input(refold) -> None:  # type: ignore[no-untyped-def]
    assert_one_line_error(refold("search", "   "), 2, "error:")
    proc = refold("search", "x", "--since", "yesterday")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "not a date" in proc.stderr
    for text in ("C++", '"unterminated', "(problem", "hello AND", "{test}", "a AND OR b"):
        assert refold("search", text, "--json").returncode == 0


def test_concurrent_imports_of_one_file_store_it_once(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFOLD_")}
    env["REFOLD_HOME"] = str(tmp_path / "home")
    procs = [subprocess.Popen([refold_exe(), "import", str(SAMPLE), "--json"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(3)]
    results = [(p.wait(timeout=60), *p.communicate()) for p in procs]
    assert all(code == 0 for code, _, _ in results), results
    reports = [json.loads(out) for _, out, _ in results]
    assert len({r["session_id"] for r in reports}) == 1
    assert sum(r["appended"] for r in reports) == 36
    listed = subprocess.run([refold_exe(), "sessions", "list", "--json"], env=env,
                            capture_output=True, text=True, check=True)
    sessions = json.loads(listed.stdout)
    assert [s["message_count"] for s in sessions] == [36]


def test_a_read_command_on_a_missing_db_path_says_so_and_creates_nothing(
        refold, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    typo = tmp_path / "typo.db"
    for args in (["sessions", "list"], ["search", "hello"], ["context", "abc"]):
        proc = refold("--db", str(typo), *args)
        assert_one_line_error(proc, 1, "no database at", str(typo))
        assert not typo.exists()  # nothing created by a read
    created = tmp_path / "new.db"
    assert refold("--db", str(created), "import", str(SAMPLE)).returncode == 0
    assert created.exists()
    listed = refold("--db", f"sqlite:///{created}", "sessions", "list", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout)


@pytest.fixture(scope="module")
def big_ledger(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A ledger whose export, listing and search each print far more than a pipe buffers."""
    from refold.store.sqlite import SQLiteStore

    db = tmp_path_factory.mktemp("pipe") / "pipe.db"
    store = SQLiteStore(str(db))
    try:
        for n in range(2000):  # a listing of ~140 KB
            store.create_session(title=f"ledger session {n}")
        session = store.create_session(title="the big one")
        store.append_messages(session.id, [
            {"role": "user" if i % 2 == 0 else "assistant",
             "content": f"ledger line {i} " + "x" * 3000} for i in range(200)])
    finally:
        store.close()
    return db, session.id


@pytest.mark.parametrize("command", [["sessions", "export", "ID"], ["sessions", "show", "ID"],
                                     ["sessions", "list", "--limit", "100000"],
                                     ["search", "ledger", "--limit", "1000"]])
def test_a_reader_that_leaves_early_ends_the_command_quietly(
        tmp_path: Path, big_ledger: tuple[Path, str], command: list[str]) -> None:
    """``refold … | head -1``: the reader closes the pipe after one line; refold stops with
    status 0 and says nothing (plain output through click, tables through rich)."""
    db, session_id = big_ledger
    args = [session_id if arg == "ID" else arg for arg in command]
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFOLD_")}
    full = subprocess.run([refold_exe(), "--db", str(db), *args], capture_output=True,
                          env=env, cwd=tmp_path, timeout=120, check=True)
    assert len(full.stdout) > 128 * 1024  # twice a pipe buffer: the reader leaves much unread
    proc = subprocess.Popen([refold_exe(), "--db", str(db), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, cwd=tmp_path)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline()  # one line, then the reader goes away
    proc.stdout.close()
    try:
        code = proc.wait(timeout=60)
    finally:
        proc.kill()
    err = proc.stderr.read().decode()
    assert code == 0, err
    assert err == ""


def test_a_table_written_to_a_pipe_keeps_every_column_and_whole_cells(
        refold, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """Piped or redirected (``refold sessions list > sessions.txt``), rich laid tables out in
    80 columns: the title wrapped over three lines and the source column was dropped."""
    title = "acme-billing: fix the 3.12 test suite, add the CSV export and the invoice totals"
    assert refold("import", str(SAMPLE), "--title", title, "--source",
                  "a-long-source-label").returncode == 0
    monkeypatch.delenv("COLUMNS", raising=False)
    listed = refold("sessions", "list")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert "source" in lines[0] and "started" in lines[0]
    (row,) = [line for line in lines if title in line]  # the whole title, on one line
    assert "a-long-source-label" in row and "36" in row
    assert len(lines) == 2  # the header and the one row


def test_the_session_list_fits_an_80_column_terminal(tmp_path: Path) -> None:
    """At 80 columns the boxed table of seven or eight columns was cut at the right edge:
    the source and parent columns were lost and "started" was split over two lines."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFOLD_")}
    env.update(REFOLD_HOME=str(tmp_path / "home"), COLUMNS="80")

    def run(*args: str) -> str:
        proc = subprocess.run([refold_exe(), *args], capture_output=True, text=True, env=env,
                              timeout=60, check=False)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    run("import", str(SAMPLE), "--source", "claude-code")
    parent = json.loads(run("sessions", "list", "--json"))[0]["id"]
    run("sessions", "fork", parent, "--at", "4", "--title", "the refund path")
    lines = run("sessions", "list").splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    assert lines[0].split() == ["id", "title", "stored", "started", "source"]
    text = "\n".join(lines)
    assert text.count("claude-code") == 2, text  # the fork keeps its parent's source
    assert f"fork of {parent[:12]}" in text, text  # the link, with the whole parent id
    assert all(line.count(":") <= 1 for line in lines), lines  # each start on one line
    run("sessions", "compact", parent, "--context-length", "2000", "--rotate")
    assert f"↳ continues {parent[:12]}" in run("sessions", "list")  # a compaction child


def test_vector_mode_on_an_archive_never_indexed_says_so(refold) -> None:  # type: ignore[no-untyped-def]
    """--mode vector on an archive `refold index` never ran on found nothing, silently."""
    assert refold("import", str(SAMPLE)).returncode == 0
    found = refold("search", "--mode", "vector", "how do we round currency?")
    assert found.returncode == 0, found.stderr
    assert "no message has a vector yet" in found.stderr and "refold index" in found.stderr
    plain = refold("search", "currency")  # the default mode says nothing
    assert plain.returncode == 0 and "vector" not in plain.stderr
