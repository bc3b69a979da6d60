"""A ``--db`` that is not a SQLite database says so and points at ``--db``: ``refold doctor
--repair`` cannot turn a text file into a database, so it is not offered there (it still is
for a damaged database, which it does repair)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from main_exit import run_main as _main

from refold.errors import StorageError
from refold.store.sqlite.database import Database

SAMPLE = Path(__file__).resolve().parents[2] / "src" / "refold" / "data" / "sample_session.jsonl"


@pytest.mark.parametrize("command", [("sessions", "list"), ("doctor",), ("doctor", "--repair"),
                                     ("import", str(SAMPLE))])
def test_a_db_that_is_not_a_database_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str],
                                             command: tuple[str, ...]) -> None:
    for name in ("REFOLD_HOME", "REFOLD_DB"):
        monkeypatch.delenv(name, raising=False)
    text_file = tmp_path / "d7.txt"
    text_file.write_text("hi\n", encoding="utf-8")
    code, out, err = _main(capsys, "--home", str(tmp_path / "home"), "--db", str(text_file),
                           *command)
    said = out + err
    assert code == 1, said
    assert f"{text_file} is not a SQLite database" in said, said
    assert "check --db / REFOLD_DB" in said
    assert "doctor --repair" not in said and "damaged" not in said
    assert text_file.read_text(encoding="utf-8") == "hi\n"  # nothing written to it
    assert not list(tmp_path.glob("d7.txt.*"))  # no backup beside it


def test_doctor_json_reports_a_file_that_is_not_a_database(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("REFOLD_DB", raising=False)
    text_file = tmp_path / "notes.db"
    text_file.write_bytes(b"x" * 4096)
    code, out, _ = _main(capsys, "--home", str(tmp_path / "home"), "--db", str(text_file),
                         "doctor", "--repair", "--json")
    report = json.loads(out)
    assert code == 1 and report["ok"] is False and "repair" not in report
    assert "is not a SQLite database" in report["database"]["error"]


def test_a_damaged_database_still_points_at_the_repair(tmp_path: Path) -> None:
    database = Database(str(tmp_path / "refold.db"))
    try:
        with pytest.raises(StorageError) as raised, database.translated():
            raise sqlite3.DatabaseError("database disk image is malformed")
    finally:
        database.close()
    assert raised.value.hint is not None and "refold doctor --repair" in raised.value.hint


@pytest.mark.parametrize("command", [("sessions", "list"), ("doctor",), ("search", "alice"),
                                     ("import", str(SAMPLE))])
@pytest.mark.parametrize("journal", ["delete", "wal"])
def test_another_programs_database_is_refused_and_left_as_it_is(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        command: tuple[str, ...], journal: str) -> None:
    """An app's SQLite file named by --db (a typo, Hermes' state.db): refold's schema was added
    to it and its journal switched to WAL, by read-only commands too; a file with a
    ``sessions`` table failed half-way, leaving refold's migrations table behind."""
    for name in ("REFOLD_HOME", "REFOLD_DB"):
        monkeypatch.delenv(name, raising=False)
    app = tmp_path / "app.db"
    conn = sqlite3.connect(app)
    conn.execute(f"PRAGMA journal_mode={journal}")
    conn.executescript("CREATE TABLE sessions(id TEXT PRIMARY KEY, title TEXT);"
                       "INSERT INTO sessions VALUES ('s1', 'alice');")
    conn.close()
    before = app.read_bytes()
    code, out, err = _main(capsys, "--home", str(tmp_path / "home"), "--db", str(app), *command)
    said = out + err
    assert code == 1, said
    assert "another program's SQLite database (tables: sessions)" in said, said
    assert app.read_bytes() == before  # not a byte changed
    conn = sqlite3.connect(f"file:{app}?mode=ro", uri=True)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == journal
    assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master")] == [
        "sessions", "sqlite_autoindex_sessions_1"]
    conn.close()


def test_an_empty_file_is_no_refold_database_for_a_read_only_command(tmp_path: Path) -> None:
    from refold.errors import NotFound
    from refold.store import open_store

    empty = tmp_path / "new.db"
    empty.touch()
    with pytest.raises(NotFound, match="no refold database"):
        open_store(str(empty), create=False)
    assert empty.stat().st_size == 0
    open_store(str(empty)).close()  # a write command makes it refold's
    open_store(str(empty), create=False).close()
