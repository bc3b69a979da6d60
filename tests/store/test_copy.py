"""refold.store.copy on any pair of stores (here SQLite → SQLite, and both backends via ``store``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from refold.errors import NotFound
from refold.store import CheckpointDraft, MemoryRow, Store
from refold.store.copy import copy_store, parents_first, session_digest, verify_copy
from refold.store.sqlite import SQLiteStore


def _fill(store: Store) -> list[str]:
    root = store.create_session(title="root", source="cli")
    store.append_messages(root.id, [{"role": "user", "content": "hello \x00 部署"},
                                    {"role": "assistant", "content": "hi"},
                                    {"role": "user", "content": "again"}])
    store.rewind(root.id, 3)
    store.add_checkpoint(root.id, CheckpointDraft(summary="s", first_seq=1, last_seq=1,
                                                  tail_start_seq=2))
    store.append_event(root.id, "goal", {"text": "ship"})
    fork = store.fork_session(root.id, 2)
    grandchild = store.create_session(parent_session_id=fork.id, link_kind="compaction")
    store.memory_save("p", "user", [MemoryRow("prefers tabs", 1.0, 1.0)], 0)
    return [root.id, fork.id, grandchild.id]


def test_copy_into_any_backend_is_faithful_and_rerun_skips(store: Store, tmp_path: Path) -> None:
    source = SQLiteStore(str(tmp_path / "source.db"))
    try:
        ids = _fill(source)
        phases: list[tuple[str, int, int]] = []
        report = copy_store(source, store, progress=lambda *p: phases.append(p))
        assert report.ok and report.sessions_copied == 3 and report.messages_copied == 5
        assert {p[0] for p in phases} == {"sessions", "memory", "verify"}
        assert phases[-1] == ("verify", 3, 3)
        for sid in ids:
            assert session_digest(store, sid) == session_digest(source, sid)
        again = copy_store(source, store)
        assert (again.sessions_copied, again.sessions_skipped, again.memory_skipped) == (0, 3, 1)
        assert again.ok
    finally:
        source.close()


def test_verification_names_what_differs(tmp_path: Path) -> None:
    source = SQLiteStore(str(tmp_path / "a.db"))
    target = SQLiteStore(str(tmp_path / "b.db"))
    try:
        ids = _fill(source)
        assert copy_store(source, target).ok
        target.rename_session(ids[0], "renamed")
        target.append_messages(ids[1], [{"role": "user", "content": "extra"}])
        target.delete_session(ids[2])
        target.memory_save("p", "user", [], 1)
        problems = verify_copy(source, target)
        assert sorted(problems) == sorted([
            f"session {ids[0]}: content differs (hash mismatch)",
            f"session {ids[1]}: 2 rows in the source, 3 in the target",
            f"session {ids[2]}: missing in the target",
            "memory p/user: rows differ"])
    finally:
        source.close()
        target.close()


def test_parents_come_first_whatever_the_listing_order(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "x.db"))
    try:
        ids = _fill(store)
        listed = store.list_sessions(limit=10)  # newest first: children before parents
        ordered = [s.id for s in parents_first(listed)]
        assert ordered.index(ids[0]) < ordered.index(ids[1]) < ordered.index(ids[2])
        orphan: Any = dataclasses.replace(listed[0], parent_session_id="gone")
        assert parents_first([orphan])[0].parent_session_id is None
    finally:
        store.close()


def _rewinds(store: Store, session_id: str) -> list[tuple[Any, ...]]:
    """A session's rewinds without their ids (each store numbers its own)."""
    return [(r.record.from_seq, r.record.count, r.record.created_at, r.record.undone, r.seqs)
            for r in store.list_rewinds(session_id)]


def test_rewinds_are_copied_and_can_be_undone_in_the_target(store: Store,
                                                            tmp_path: Path) -> None:
    source = SQLiteStore(str(tmp_path / "source.db"))
    try:
        root_id = _fill(source)[0]  # one rewind, holding seq 3
        undone = source.create_session(title="undone")
        source.append_messages(undone.id, [{"role": "user", "content": "a"},
                                           {"role": "assistant", "content": "b"},
                                           {"role": "user", "content": "c"}])
        source.undo_rewind(source.rewind(undone.id, 3).id)
        assert _rewinds(source, root_id)[0][3:] == (False, (3,))
        assert _rewinds(source, undone.id)[0][3:] == (True, ())
        assert copy_store(source, store).ok
        for sid in (root_id, undone.id):
            assert _rewinds(store, sid) == _rewinds(source, sid)
        copied = store.list_rewinds(root_id)[0].record
        assert [m.seq for m in store.get_messages(root_id)] == [1, 2]
        store.undo_rewind(copied.id)  # the copy can be un-rewound like the original
        assert [m.message["content"] for m in store.get_messages(root_id)] == [
            "hello \x00 部署", "hi", "again"]
        assert store.list_rewinds(root_id)[0].record.undone
        with pytest.raises(NotFound):
            store.list_rewinds("no-such-session")
    finally:
        source.close()


def test_verification_notices_missing_rewind_records(tmp_path: Path) -> None:
    """A copy made without rewind records (as refold migrate did before it copied them) is
    reported, not passed as faithful."""
    source = SQLiteStore(str(tmp_path / "a.db"))
    target = SQLiteStore(str(tmp_path / "b.db"))
    try:
        root_id = _fill(source)[0]
        session = source.get_session(root_id)
        target.import_session(session, source.iter_messages(root_id, include_inactive=True),
                              source.list_checkpoints(root_id), source.list_events(root_id))
        problems = verify_copy(source, target, [session])
        assert [p for p in problems if p.startswith("session")] == [
            f"session {root_id}: content differs (hash mismatch)"]
    finally:
        source.close()
        target.close()


def test_a_session_that_grew_after_its_copy_is_named_and_a_new_target_copies_it(
        tmp_path: Path) -> None:
    """A re-run does not update a session it copied before (it skips it): the check says that
    the session grew since, and a copy into a new target holds it whole."""
    source = SQLiteStore(str(tmp_path / "a.db"))
    first = SQLiteStore(str(tmp_path / "b.db"))
    fresh = SQLiteStore(str(tmp_path / "c.db"))
    try:
        ids = _fill(source)
        assert copy_store(source, first).ok
        source.append_messages(ids[1], [{"role": "user", "content": "said after the copy"}])
        again = copy_store(source, first)
        assert again.mismatches == [
            f"session {ids[1]}: 3 rows in the source, 2 in the target (it grew after it was "
            "copied: a re-run copies new sessions, not what a copied one gained since)"]
        assert copy_store(source, fresh).ok
    finally:
        for store in (source, first, fresh):
            store.close()
