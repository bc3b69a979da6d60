"""A ``--lineage`` JSON export imported into another archive keeps its links: the rotation
child continues its parent there too, so ``resume`` follows the continuation and search
shows a message the rotation carried forward once."""

from __future__ import annotations

import json
from pathlib import Path

from import_cli import SAMPLE, Run, ok_json

from refold.store.sqlite import SQLiteStore


def test_a_lineage_export_keeps_its_links(tmp_path: Path, origin: Run, other: Run) -> None:
    assert origin("import", str(SAMPLE), "--title", "base").exit_code == 0
    rotated = origin("sessions", "compact", "base", "--context-length", "4000", "--rotate")
    assert rotated.exit_code == 0, rotated.output
    export = tmp_path / "lineage.json"
    done = origin("sessions", "export", "base #2", "--lineage", "--format", "json",
                  "-o", str(export))
    assert done.exit_code == 0, done.output
    exported = json.loads(export.read_text(encoding="utf-8"))["sessions"]
    child = next(s for s in exported if s.get("parent_session_id"))

    reports = ok_json(other("import", str(export), "--json"))
    imported = reports if isinstance(reports, list) else [reports]
    assert {r["session_id"] for r in imported} == {s["id"] for s in exported}
    store = SQLiteStore(str(tmp_path / "b" / "home" / "refold.db"))
    try:
        there = store.get_session(child["id"])
        assert (there.parent_session_id, there.link_kind) == \
            (child["parent_session_id"], child["link_kind"])
    finally:
        store.close()
    resumed = ok_json(other("sessions", "resume", "base", "--json"))
    assert resumed["id"] == child["id"]
    hits = ok_json(other("search", "regression test v2.2 fallback", "--mode", "fts", "--json"))
    contents = [h["content"] for h in hits]
    assert len(contents) == len(set(contents))  # a carried-forward message once
    # imported again: nothing new, the links as they were
    again = ok_json(other("import", str(export), "--json"))
    again = again if isinstance(again, list) else [again]
    assert all(r["appended"] == 0 for r in again)
