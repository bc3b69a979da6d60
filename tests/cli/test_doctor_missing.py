"""``refold doctor`` never creates a database: a mistyped ``--db`` (a SQLite path or a PostgreSQL
``?schema=``) is a failed check, ``--repair`` included, and nothing is created there; the home's
own database before anything was stored is "not there yet", not a failure."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from main_exit import run_main as _main


@pytest.fixture(autouse=True)
def _no_refold_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("REFOLD_HOME", "REFOLD_DB"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("repair", [(), ("--repair",)])
def test_doctor_reports_a_mistyped_sqlite_path_and_creates_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], repair: tuple[str, ...]) -> None:
    home = tmp_path / "home"
    typo = tmp_path / "typo" / "nonexist.db"
    args = ("--home", str(home), "--db", str(typo), "doctor", *repair)
    code, out, _ = _main(capsys, *args, "--json")
    database = json.loads(out)["database"]
    assert code == 1 and database["ok"] is False and database["missing"] is True
    assert database["error"].startswith(f"no refold database at {typo}")
    assert "check --db / REFOLD_DB" in database["error"]
    code, out, _ = _main(capsys, *args)
    assert code == 1 and f"no refold database at {typo}" in out
    assert "integrity" not in out and "repair:" not in out
    assert not typo.parent.exists() and not home.exists()


def test_doctor_on_a_fresh_home_says_no_database_yet_and_creates_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "home"
    for repair in ((), ("--repair",)):
        code, out, _ = _main(capsys, "--home", str(home), "doctor", *repair, "--json")
        report = json.loads(out)
        assert code == 0 and report["ok"] is True, report
        assert report["database"]["missing"] is True
        assert report["database"]["note"].startswith(f"no database yet at {home / 'refold.db'}")
    code, out, _ = _main(capsys, "--home", str(home), "doctor")
    assert code == 0 and "no database yet at" in out and "FAIL" not in out
    assert not home.exists()


@pytest.fixture
def typo_schema(postgres_url: str) -> Iterator[str]:
    import psycopg

    schema = f"typo_{uuid.uuid4().hex[:12]}"
    yield schema
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _schema_exists(postgres_url: str, schema: str) -> bool:
    import psycopg

    with psycopg.connect(postgres_url) as conn:
        row = conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = %s",
                           (schema,)).fetchone()
    return bool(row and row[0])


@pytest.mark.postgres
@pytest.mark.parametrize("repair", [(), ("--repair",)])
def test_doctor_reports_a_mistyped_postgres_schema_and_creates_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], postgres_url: str,
        typo_schema: str, repair: tuple[str, ...]) -> None:
    args = ("--home", str(tmp_path / "home"), "--db", f"{postgres_url}?schema={typo_schema}",
            "doctor", *repair)
    code, out, _ = _main(capsys, *args, "--json")
    database = json.loads(out)["database"]
    assert code == 1 and database["ok"] is False and database["missing"] is True
    assert database["error"].startswith(f"no refold data in schema {typo_schema!r}")
    code, out, _ = _main(capsys, *args)
    assert code == 1 and f"no refold data in schema {typo_schema!r}" in out
    assert not _schema_exists(postgres_url, typo_schema)
