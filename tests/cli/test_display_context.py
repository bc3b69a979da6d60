"""`refold context SESSION` counts the memory the session's prompt was frozen with (its
``memory_snapshot`` event, or its lineage's nearest, as the engine reads it), not the memory
files as they are now; the current files stand in only for a session with no snapshot, and
the output says which it counted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from refold.cli.main import cli
from refold.store.sqlite import SQLiteStore
from refold.tokens import get_counter

MODEL = "gpt-4o"


def run(home: Path, *args: str) -> Result:
    env: dict[str, str | None] = {"REFOLD_UPSTREAM": None, "REFOLD_SUMMARIZER_URL": None,
                                  "REFOLD_SUMMARIZER": None, "REFOLD_HOME": None,
                                  "REFOLD_DB": None}
    return CliRunner().invoke(cli, ["--home", str(home), *args], env=env,
                              catch_exceptions=False)


def context(home: Path, ref: str, *extra: str) -> Any:
    result = run(home, "context", ref, "--context-length", "12000", "--model", MODEL, *extra)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout) if "--json" in extra else result.output


def test_context_counts_the_sessions_frozen_snapshot(tmp_path: Path) -> None:
    from refold.runtime import Engine

    home = tmp_path / "h"
    assert run(home, "memory", "add", "The deploy uses blue/green.").exit_code == 0
    store = SQLiteStore(str(home / "refold.db"))
    try:
        with Engine(store, model=MODEL, context_length=12_000,
                    memory_dir=home / "memories") as engine:
            rt = engine.open_session(new=True, title="work")  # freezes the snapshot
            frozen = rt.memory_snapshot
            sid = rt.session_id
        store.append_messages(sid, [{"role": "user", "content": "hello"}])
    finally:
        store.close()
    assert "blue/green" in frozen
    # memory written since: new sessions get it, this one's prompt does not
    big = "Staging runs on port 5433; the CI needs -W error and pytest -q. " * 8
    assert run(home, "memory", "add", big).exit_code == 0
    data = context(home, sid, "--json")
    assert data["memory_source"] == "snapshot"
    assert data["parts"]["memory"] == get_counter(MODEL).count_text(frozen)
    assert "session's frozen snapshot" in context(home, sid)


def test_context_uses_the_lineages_nearest_snapshot_else_the_files(tmp_path: Path) -> None:
    home = tmp_path / "h"
    assert run(home, "memory", "add", "Prefers pytest -q over verbose output. " * 5
               ).exit_code == 0
    store = SQLiteStore(str(home / "refold.db"))
    try:
        parent = store.create_session(title="root", model=MODEL)
        store.append_event(parent.id, "memory_snapshot", {"text": ""})  # frozen empty
        child = store.create_session(title="root #2", model=MODEL,
                                     parent_session_id=parent.id, link_kind="compaction")
        bare = store.create_session(title="imported", model=MODEL)
        for sid in (parent.id, child.id, bare.id):
            store.append_messages(sid, [{"role": "user", "content": "hello"}])
    finally:
        store.close()
    for sid in (parent.id, child.id):  # the child has none of its own: its parent's
        data = context(home, sid, "--json")
        assert data["memory_source"] == "snapshot" and data["parts"]["memory"] == 0, sid
    data = context(home, bare.id, "--json")
    assert data["memory_source"] == "files" and data["parts"]["memory"] > 0
    assert "current memory files" in context(home, bare.id)
