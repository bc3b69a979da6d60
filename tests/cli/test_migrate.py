"""``refold migrate``: SQLite → PostgreSQL (and back) copies everything, verifies, re-runs safely."""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner, Result

from refold.cli.main import cli, main
from refold.store import CheckpointDraft, MemoryRow, Store, open_store
from refold.store.copy import session_digest, verify_copy


@pytest.fixture
def pg_url(postgres_url: str) -> Iterator[str]:
    """A URL naming a fresh schema (created by the migrate run), dropped afterwards."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    yield f"{postgres_url}?schema={schema}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _fill(store: Store) -> list[str]:
    """A store with lineage, rewound rows, checkpoints, events, usage, odd text and memory."""
    root = store.create_session(title="deploy work", source="cli", model="m1", owner="alice")
    store.append_messages(root.id, [
        {"role": "user", "content": "deploy the server\x00 to production"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "sh", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "部署完成 \ud800"},
        {"role": "user", "content": "再试一次"},
        {"role": "assistant", "content": "ok"},
    ], token_counts=[5, 7, 3, 4, 1])
    store.rewind(root.id, 4)
    store.append_messages(root.id, [{"role": "user", "content": "instead, roll back"}])
    store.add_checkpoint(root.id, CheckpointDraft(summary="did deploy", first_seq=1, last_seq=2,
                                                  tail_start_seq=3, anchors=["/etc/x"],
                                                  details={"k": [1, 2]}))
    store.append_event(root.id, "todo", {"items": ["a", "b"]})
    store.add_usage(root.id, input_tokens=10, output_tokens=3, cost_usd=0.25)
    fork = store.fork_session(root.id, 3)
    child = store.create_session(parent_session_id=root.id, link_kind="compaction")
    store.append_messages(child.id, [{"role": "user", "content": "continued 部"}])
    store.end_session(child.id, "done")
    store.memory_save("default", "memory", [MemoryRow("likes tea", 1.0, 2.0)], 0)
    return [root.id, fork.id, child.id]


def _migrate(*args: str) -> Result:
    return CliRunner().invoke(cli, ["migrate", *args, "--json"], catch_exceptions=True)


@pytest.mark.postgres
def test_sqlite_to_postgres_copies_and_verifies_then_rerun_is_a_no_op(
        tmp_path: Path, pg_url: str) -> None:
    source_url = f"sqlite:///{tmp_path / 'src.db'}"
    source = open_store(source_url)
    ids = _fill(source)
    first = _migrate("--from", source_url, "--to", pg_url)
    assert first.exit_code == 0, (first.output, first.exception)
    report = json.loads(first.output)
    assert report["ok"] and report["mismatches"] == []
    assert (report["sessions_copied"], report["messages_copied"]) == (3, 6 + 3 + 1)
    assert report["memory_copied"] == 1

    target = open_store(pg_url)
    try:
        for sid in ids:
            assert session_digest(target, sid) == session_digest(source, sid)
            assert target.get_session(sid) == source.get_session(sid)
            assert (target.get_messages(sid, include_inactive=True)
                    == source.get_messages(sid, include_inactive=True))
            assert target.projection(sid).messages == source.projection(sid).messages
        assert target.memory_load("default", "memory")[0] == [MemoryRow("likes tea", 1.0, 2.0)]
        assert target.resolve_resume(ids[0]).id == ids[2]
        assert {h.seq for h in target.search(_q("部"))} == {h.seq for h in source.search(_q("部"))}
        before = target.info()

        second = _migrate("--from", source_url, "--to", pg_url)
        assert second.exit_code == 0, (second.output, second.exception)
        again = json.loads(second.output)
        assert (again["sessions_copied"], again["sessions_skipped"]) == (0, 3)
        assert again["messages_copied"] == 0 and again["memory_skipped"] == 1
        assert target.info() == before
        # The ledger keeps working on the copy: appends continue the chain and seq.
        more = target.sync_messages(ids[0], [m.message for m in target.get_messages(ids[0])]
                                    + [{"role": "assistant", "content": "rolled back"}])
        assert [m.seq for m in more.appended] == [7] and more.skipped == 4
    finally:
        target.close()
        source.close()


def _q(text: str) -> Any:
    from refold.store import SearchQuery

    return SearchQuery(text, include_inactive=True, limit=50)


@pytest.mark.postgres
def test_postgres_back_to_sqlite_round_trips(tmp_path: Path, pg_url: str) -> None:
    origin = open_store(pg_url)
    try:
        ids = _fill(origin)
    finally:
        origin.close()
    back_url = str(tmp_path / "back.db")
    result = _migrate("--from", pg_url, "--to", back_url)
    assert result.exit_code == 0, (result.output, result.exception)
    origin, back = open_store(pg_url), open_store(back_url)
    try:
        assert verify_copy(origin, back) == []
        assert [session_digest(back, sid) for sid in ids] == [session_digest(origin, sid)
                                                              for sid in ids]
    finally:
        origin.close()
        back.close()


@pytest.mark.postgres
def test_a_tampered_copy_fails_verification(tmp_path: Path, pg_url: str,
                                            postgres_url: str) -> None:
    source_url = str(tmp_path / "src.db")
    source = open_store(source_url)
    root = _fill(source)[0]
    source.close()
    assert _migrate("--from", source_url, "--to", pg_url).exit_code == 0
    schema = pg_url.rsplit("schema=", 1)[1]
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'UPDATE "{schema}".messages SET token_count = 99 '
                     "WHERE session_id = %s AND seq = 1", (root,))
    result = _migrate("--from", source_url, "--to", pg_url)
    assert result.exit_code == 1
    assert f"session {root}: content differs" in result.output
    assert "differs from the source" in str(result.exception)


def test_same_store_on_both_sides_is_a_usage_error(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "x.db")
    with pytest.raises(SystemExit) as exit_info:
        main(["migrate", "--from", db, "--to", db])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.startswith("error: --from and --to name the same store")


@pytest.mark.postgres
def test_session_records_survive_with_every_field(tmp_path: Path, pg_url: str) -> None:
    source = open_store(str(tmp_path / "s.db"))
    try:
        ids = _fill(source)
        target = open_store(pg_url)
        try:
            from refold.store.copy import copy_store

            report = copy_store(source, target)
            assert report.ok, report.mismatches
            for sid in ids:
                assert dataclasses.asdict(target.get_session(sid)) == dataclasses.asdict(
                    source.get_session(sid))
                # Checkpoint ids are the target's own; everything else is kept.
                assert [dataclasses.replace(c, id=0) for c in target.list_checkpoints(sid)] == [
                    dataclasses.replace(c, id=0) for c in source.list_checkpoints(sid)]
                assert [(e.kind, e.payload, e.created_at) for e in target.list_events(sid)] == [
                    (e.kind, e.payload, e.created_at) for e in source.list_events(sid)]
        finally:
            target.close()
    finally:
        source.close()


def test_human_output_shows_progress_and_summary(tmp_path: Path) -> None:
    source_url = str(tmp_path / "a.db")
    source = open_store(source_url)
    _fill(source)
    source.close()
    result = CliRunner().invoke(cli, ["migrate", "--from", source_url, "--to",
                                      f"sqlite:///{tmp_path / 'b.db'}"])
    assert result.exit_code == 0, (result.output, result.exception)
    assert "sessions copied" in result.output and "│ 3" in result.output
    assert "verification" in result.output and "ok" in result.output
    # the two stores whole on one line (as the table's title they were cut mid-path)
    assert f"{source_url} → sqlite:///{tmp_path / 'b.db'}\n" in result.output, result.output


def _home_with_file_memory(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    ok = CliRunner().invoke(cli, ["--home", str(home), "memory", "add", "Deploys go blue/green."])
    assert ok.exit_code == 0, ok.output
    ok = CliRunner().invoke(cli, ["--home", str(home), "memory", "add", "-t", "user",
                                  "Prefers pytest -q."])
    assert ok.exit_code == 0, ok.output
    return home


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_file_memory_travels_into_db_memory_and_back(tmp_path: Path, backend: str,
                                                     request: pytest.FixtureRequest) -> None:
    home = _home_with_file_memory(tmp_path)
    target = str(tmp_path / "copy.db") if backend == "sqlite" else request.getfixturevalue(
        "pg_url")
    result = CliRunner().invoke(cli, ["--home", str(home), "migrate", "--to", target, "--json"])
    assert result.exit_code == 0, (result.output, result.exception)
    report = json.loads(result.output)
    assert report["memory_files"]["copied"] == {"memory": 1, "user": 1}
    copy = open_store(target)
    try:
        assert [r.text for r in copy.memory_load("default", "memory")[0]] == \
            ["Deploys go blue/green."]
        assert [r.text for r in copy.memory_load("default", "user")[0]] == ["Prefers pytest -q."]
    finally:
        copy.close()
    again = json.loads(CliRunner().invoke(
        cli, ["--home", str(home), "migrate", "--to", target, "--json"]).output)
    assert again["memory_files"]["copied"] == {} and again["memory_files"]["same"] == [
        "memory", "user"]
    fresh = tmp_path / "fresh"
    back = CliRunner().invoke(cli, ["--home", str(fresh), "migrate", "--from", target,
                                    "--memory-to-files", "--json"])
    assert back.exit_code == 0, (back.output, back.exception)
    assert "Deploys go blue/green." in (fresh / "memories" / "MEMORY.md").read_text("utf-8")
    assert "Prefers pytest -q." in (fresh / "memories" / "USER.md").read_text("utf-8")


def test_memory_copy_never_overwrites_other_entries(tmp_path: Path) -> None:
    home = _home_with_file_memory(tmp_path)
    target = tmp_path / "copy.db"
    store = open_store(str(target))
    store.memory_save("default", "memory", [MemoryRow("their own note", 1.0, 1.0)], 0)
    store.close()
    result = CliRunner().invoke(cli, ["--home", str(home), "migrate", "--to", str(target),
                                      "--json"])
    report = json.loads(result.output)
    assert report["memory_files"]["conflicts"] == ["memory"]
    store = open_store(str(target))
    assert [r.text for r in store.memory_load("default", "memory")[0]] == ["their own note"]
    store.close()


def test_the_source_spelled_another_way_is_refused(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "x.db"
    open_store(str(db)).close()
    (tmp_path / "link.db").symlink_to(db)
    for other in (f"sqlite:///{db}", str(tmp_path / "link.db"), f"{tmp_path}/./x.db"):
        with pytest.raises(SystemExit) as exit_info:
            main(["migrate", "--from", str(db), "--to", other])
        assert exit_info.value.code == 2, other
        assert "name the same store" in capsys.readouterr().err


@pytest.mark.postgres
def test_the_same_postgres_schema_spelled_another_way_is_refused(
        tmp_path: Path, pg_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    other = pg_url.replace("127.0.0.1", "localhost")
    assert other != pg_url
    with pytest.raises(SystemExit) as exit_info:
        main(["migrate", "--from", pg_url, "--to", other])
    assert exit_info.value.code == 2
    assert "name the same store" in capsys.readouterr().err
