"""``--db postgresql://…`` and ``REFOLD_DB`` pick the PostgreSQL backend for every CLI command."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

import refold
from refold.cli.main import cli

pytestmark = pytest.mark.postgres


@pytest.fixture
def pg_url(postgres_url: str) -> Iterator[str]:
    schema = f"t_{uuid.uuid4().hex[:12]}"
    yield f"{postgres_url}?schema={schema}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_db_flag_and_env_choose_postgres(tmp_path: Path, pg_url: str,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("REFOLD_HOME", "REFOLD_DB"):
        monkeypatch.delenv(name, raising=False)
    transcript = tmp_path / "t.json"
    transcript.write_text(json.dumps([{"role": "user", "content": "部署 the gateway"},
                                      {"role": "assistant", "content": "deployed"}]),
                          encoding="utf-8")
    home = str(tmp_path / "home")
    runner = CliRunner()
    imported = runner.invoke(cli, ["--home", home, "--db", pg_url, "import", str(transcript),
                                   "--title", "gw", "--json"])
    assert imported.exit_code == 0, (imported.output, imported.exception)
    session_id = json.loads(imported.output)["session_id"]
    assert not (tmp_path / "home" / "refold.db").exists()  # nothing went to SQLite

    listed = runner.invoke(cli, ["--home", home, "sessions", "list", "--json"],
                           env={"REFOLD_DB": pg_url})
    assert [s["id"] for s in json.loads(listed.output)] == [session_id]
    found = runner.invoke(cli, ["--home", home, "search", "部", "--json"],
                          env={"REFOLD_DB": pg_url})
    assert [(h["session_id"], h["seq"]) for h in json.loads(found.output)] == [(session_id, 1)]

    store = refold.open(pg_url)  # the library entry point dispatches on the URL too
    try:
        assert type(store).__name__ == "PostgresStore"
        assert store.resolve_session("gw").id == session_id
    finally:
        store.close()
