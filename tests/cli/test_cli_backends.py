"""The CLI end to end on both backends (``--db`` pointing at the test store's database)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from refold.cli.main import cli
from refold.store import Store

SAMPLE = Path(__file__).resolve().parents[2] / "src" / "refold" / "data" / "sample_session.jsonl"


def db_url(store: Store) -> str:
    schema = getattr(store, "schema", None)
    if schema is None or "schema=" in store.url:
        return store.url
    return f"{store.url}{'&' if '?' in store.url else '?'}schema={schema}"


def invoke(store: Store, home: Path, *args: str) -> Any:
    result: Result = CliRunner().invoke(cli, ["--home", str(home), "--db", db_url(store), *args])
    assert result.exit_code == 0, (result.output, result.exception)
    return json.loads(result.output) if "--json" in args else result.output


def test_import_search_export_on_each_backend(store: Store, tmp_path: Path) -> None:
    home = tmp_path / "home"
    first = invoke(store, home, "import", str(SAMPLE), "--json")
    assert (first["appended"], first["skipped"]) == (36, 0)
    again = invoke(store, home, "import", str(SAMPLE), "--json")
    assert (again["session_id"], again["appended"], again["skipped"]) == \
        (first["session_id"], 0, 36)
    assert store.get_session(first["session_id"]).message_count == 36  # the fixture's view
    hits = invoke(store, home, "search", "退款", "--json")
    assert hits and all("退款" in h["content"] for h in hits)
    english = invoke(store, home, "search", "regression test", "--role", "user", "--json")
    lines = SAMPLE.read_text(encoding="utf-8").splitlines()
    wanted = next(i for i, line in enumerate(lines, start=1) if "regression test" in line)
    assert [(h["seq"], h["role"]) for h in english] == [(wanted, "user")]
    listed = invoke(store, home, "sessions", "list", "--json")
    assert [s["id"] for s in listed] == [first["session_id"]]
    exported = invoke(store, home, "sessions", "export", first["session_id"]).splitlines()
    assert [json.loads(line) for line in exported] == [json.loads(line) for line in lines]
    report = invoke(store, home, "doctor", "--json")
    assert report["database"]["ok"] is True
