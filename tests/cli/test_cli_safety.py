"""Issue 14 item 1: no command destroys data the user did not name (both backends where a
store is involved)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from refold.cli.main import cli
from refold.errors import InvalidInput, NotFound
from refold.store import Store

SAMPLE = Path(__file__).resolve().parents[2] / "src" / "refold" / "data" / "sample_session.jsonl"


def db_url(store: Store) -> str:
    schema = getattr(store, "schema", None)
    if schema is None or "schema=" in store.url:
        return store.url
    return f"{store.url}{'&' if '?' in store.url else '?'}schema={schema}"


def run(home: Path, *args: str, db: str | None = None, input: str | None = None) -> Result:
    prefix = ["--home", str(home)] + (["--db", db] if db else [])
    return CliRunner().invoke(cli, [*prefix, *args], input=input)


def ok(result: Result) -> str:
    assert result.exit_code == 0, (result.output, result.exception)
    return result.output


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("REFOLD_HOME", "REFOLD_DB"):
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    ok(run(home, "import", str(SAMPLE)))
    ok(run(home, "memory", "add", "The deploy uses blue/green."))
    return home


def _sid(home: Path, db: str | None = None) -> str:
    return str(json.loads(ok(run(home, "sessions", "list", "--json", db=db)))[0]["id"])


@pytest.mark.parametrize("victim", ["refold.db", "refold.db-wal", "refold.toml",
                                    "memories/MEMORY.md"])
def test_export_refuses_refolds_own_files(home: Path, victim: str) -> None:
    (home / "refold.toml").write_text('model = "gpt-4o-mini"\n', encoding="utf-8")
    target = home / victim
    before = target.read_bytes() if target.exists() else None
    result = run(home, "sessions", "export", _sid(home), "-o", str(target), "--force")
    assert isinstance(result.exception, InvalidInput)  # main() renders it, exit 2
    assert "refold's own file" in str(result.exception)
    assert (target.read_bytes() if target.exists() else None) == before
    assert len(json.loads(ok(run(home, "sessions", "list", "--json")))) == 1


def test_export_refuses_the_database_through_a_symlink(home: Path, tmp_path: Path) -> None:
    link = tmp_path / "innocent.jsonl"
    link.symlink_to(home / "refold.db")
    size = (home / "refold.db").stat().st_size
    result = run(home, "sessions", "export", _sid(home), "-o", str(link), "--force")
    assert isinstance(result.exception, InvalidInput)
    assert (home / "refold.db").stat().st_size == size


def test_export_needs_force_for_an_existing_file(home: Path, tmp_path: Path) -> None:
    target = tmp_path / "notes.txt"
    target.write_text("my notes\n", encoding="utf-8")
    refused = run(home, "sessions", "export", _sid(home), "-o", str(target))
    assert isinstance(refused.exception, InvalidInput) and "--force" in str(refused.exception)
    assert target.read_text(encoding="utf-8") == "my notes\n"
    ok(run(home, "sessions", "export", _sid(home), "-o", str(target), "--force"))
    lines = target.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 36 and json.loads(lines[0])["role"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".notes")] == []


def test_failed_export_leaves_the_existing_file_untouched(store: Store, tmp_path: Path) -> None:
    home, db = tmp_path / "home", db_url(store)
    ok(run(home, "import", str(SAMPLE), db=db))
    (tmp_path / "out").mkdir()
    target = tmp_path / "out" / "old.jsonl"
    target.write_text("keep me\n", encoding="utf-8")
    failed = run(home, "sessions", "export", "no-such-session", "-o", str(target), "--force",
                 db=db)
    assert isinstance(failed.exception, NotFound)
    assert target.read_text(encoding="utf-8") == "keep me\n"
    assert os.listdir(tmp_path / "out") == ["old.jsonl"]


def _lineage(store: Store, *, live: bool) -> list[str]:
    ids, parent = [], None
    for n, title in enumerate(["lin", "lin #2", "lin #3"]):
        session = store.create_session(title=title, parent_session_id=parent,
                                       link_kind="compaction" if parent else None)
        store.append_messages(session.id, [{"role": "user", "content": f"turn {n}"}])
        if n < 2 or not live:
            store.end_session(session.id, "rotation")
        ids.append(session.id)
        parent = session.id
    return ids


def test_prune_spares_a_live_lineage_and_shows_its_plan(store: Store, tmp_path: Path) -> None:
    live = _lineage(store, live=True)
    db, home = db_url(store), tmp_path / "home"
    out = json.loads(ok(run(home, "sessions", "prune", "--older-than", "0", "--yes", "--json",
                            db=db)))
    assert out["deleted_sessions"] == 0 and out["lineages"] == []
    assert [store.get_session(i).id for i in live] == live


def test_prune_asks_before_deleting_and_names_what_goes(store: Store, tmp_path: Path) -> None:
    ended = _lineage(store, live=False)
    db, home = db_url(store), tmp_path / "home"
    refused = run(home, "sessions", "prune", "--older-than", "0", db=db)  # stdin is no tty
    assert isinstance(refused.exception, InvalidInput) and "--yes" in str(refused.exception)
    assert "would delete" in refused.output and "lin #2" in refused.output
    assert len(store.list_sessions()) == 3
    dry = json.loads(ok(run(home, "sessions", "prune", "--older-than", "0", "--dry-run",
                            "--json", db=db)))
    assert dry["deleted_sessions"] == 0
    assert [s["id"] for s in dry["lineages"][0]["sessions"]] == ended
    done = json.loads(ok(run(home, "sessions", "prune", "--older-than", "0", "--yes", "--json",
                             db=db)))
    assert done["deleted_sessions"] == 3 and store.list_sessions() == []


def test_export_through_a_symlink_replaces_its_target_and_keeps_the_link(
        home: Path, tmp_path: Path) -> None:
    target = tmp_path / "target.jsonl"
    target.write_text("old\n", encoding="utf-8")
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    ok(run(home, "sessions", "export", _sid(home), "-o", str(link), "--force"))
    assert link.is_symlink() and os.readlink(link) == str(target)
    lines = target.read_text(encoding="utf-8").splitlines()
    assert len(lines) > 1 and all(json.loads(line)["role"] for line in lines)


def test_export_to_a_device_writes_it_and_leaves_it_a_device(home: Path) -> None:
    devnull = Path(os.devnull)
    before = devnull.stat().st_mode
    result = run(home, "sessions", "export", _sid(home), "-o", os.devnull)  # no --force needed
    assert "wrote" in ok(result)
    assert devnull.stat().st_mode == before and not devnull.is_file()


def test_export_dash_is_standard_output(home: Path, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    out = ok(run(home, "sessions", "export", _sid(home), "-o", "-"))
    assert not (tmp_path / "-").exists()
    roles = [json.loads(line)["role"] for line in out.splitlines()]
    assert len(roles) > 2 and "assistant" in roles


def test_export_refuses_a_skill_file(home: Path) -> None:
    ok(run(home, "skills", "add", "deploy-app", "-d", "How to deploy", "--body", "Run make."))
    skill = home / "skills" / "deploy-app" / "SKILL.md"
    before = skill.read_bytes()
    result = run(home, "sessions", "export", _sid(home), "-o", str(skill), "--force")
    assert isinstance(result.exception, InvalidInput) and "refold's own file" in str(
        result.exception)
    assert skill.read_bytes() == before
