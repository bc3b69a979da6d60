"""A ``--lineage`` JSON export of a fork (or branch) imported into another archive keeps the
fork's link. There the fork's parent holds no messages of its own (the fork holds copies of
them): it was left out, and the fork came in as a session of its own. It comes in as the
messages its fork copied, under its id and title, and the fork is its fork again; through a
rotation and through a fork of a fork too. Importing the export again stores nothing; a
parent stored already is left as it is; a link that cannot be kept is said."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from import_cli import SAMPLE, Run, cli_on_home, ok_json

from refold.store.base import Session
from refold.store.sqlite import SQLiteStore


def _lines(path: Path, *contents: str, role: str = "user") -> Path:
    path.write_text("".join(json.dumps({"role": role, "content": c}) + "\n" for c in contents),
                    encoding="utf-8")
    return path


def _sessions(tmp_path: Path, home: str) -> dict[str, tuple[Session, list[str]]]:
    """Every session of a home with its active messages' identities."""
    store = SQLiteStore(str(tmp_path / home / "home" / "refold.db"))
    try:
        return {s.id: (s, [m.identity for m in store.get_messages(s.id)])
                for s in store.list_sessions(limit=100)}
    finally:
        store.close()


def _export(tmp_path: Path, run: Run, ref: str) -> Path:
    out = tmp_path / f"{ref.replace(' ', '_').replace('#', '')}.json"
    done = run("sessions", "export", ref, "--lineage", "--format", "json", "-o", str(out))
    assert done.exit_code == 0, done.output
    return out


def _reports(result: Any) -> list[dict[str, Any]]:
    found = ok_json(result)
    return found if isinstance(found, list) else [found]


def _fork_with_turns(tmp_path: Path, run: Run) -> tuple[str, str]:
    """``base`` (the sample, 36 messages) and ``fork5``, its fork at message 5 that went on
    with two messages of its own: their ids."""
    base = ok_json(run("import", str(SAMPLE), "--title", "base", "--json"))["session_id"]
    fork = ok_json(run("sessions", "fork", "base", "--at", "5", "--title", "fork5", "--json"))
    more = _lines(tmp_path / "more.jsonl", "only in the fork: what about the cache?")
    assert run("import", str(more), "--session", "fork5").exit_code == 0
    return base, fork["id"]


def test_a_forks_lineage_export_keeps_the_fork_link(tmp_path: Path, origin: Run,
                                                    other: Run) -> None:
    base, fork = _fork_with_turns(tmp_path, origin)
    export = _export(tmp_path, origin, "fork5")
    there = _sessions(tmp_path, "a")

    reports = _reports(other("import", str(export), "--json"))
    assert [r["session_id"] for r in reports] == [base, fork]
    assert reports[0]["copied_by"] == fork and reports[0]["appended"] == 5
    here = _sessions(tmp_path, "b")
    assert set(here) == {base, fork}
    parent, parent_rows = here[base]
    child, child_rows = here[fork]
    assert (child.parent_session_id, child.link_kind) == (base, "fork")
    assert (parent.title, child.title) == ("base", "fork5")
    assert parent.parent_session_id is None
    assert child_rows == there[fork][1]  # the fork's messages, its copies and its own
    assert len(child_rows) == 6 and parent_rows == there[base][1][:5]  # the fork point
    # imported again: nothing stored, nothing duplicated, the links as they were
    again = _reports(other("import", str(export), "--json"))
    assert [(r["appended"], r["skipped"]) for r in again] == [(0, 5), (0, 6)]
    assert {k: (s.parent_session_id, s.link_kind, rows)
            for k, (s, rows) in _sessions(tmp_path, "b").items()} == \
        {k: (s.parent_session_id, s.link_kind, rows) for k, (s, rows) in here.items()}


def test_a_fork_of_a_rotation_and_a_fork_of_a_fork(tmp_path: Path, origin: Run,
                                                   other: Run) -> None:
    base, fork = _fork_with_turns(tmp_path, origin)
    rotated = origin("sessions", "compact", "base", "--context-length", "4000", "--rotate")
    assert rotated.exit_code == 0, rotated.output
    rotation = ok_json(origin("sessions", "show", "base #2", "--json"))["session"]["id"]
    rotfork = ok_json(origin("sessions", "fork", "base #2", "--at", "9", "--title", "rotfork",
                             "--json"))["id"]
    ff = ok_json(origin("sessions", "fork", "fork5", "--at", "6", "--title", "ff",
                        "--json"))["id"]
    there = _sessions(tmp_path, "a")

    for export in (_export(tmp_path, origin, "rotfork"), _export(tmp_path, origin, "ff")):
        assert all("error" not in r for r in _reports(other("import", str(export), "--json")))
    here = _sessions(tmp_path, "b")
    links = {k: (s.title, s.parent_session_id, s.link_kind) for k, (s, _) in here.items()}
    assert links == {base: ("base", None, None),
                     rotation: ("base #2", base, "compaction"),
                     rotfork: ("rotfork", rotation, "fork"),
                     fork: ("fork5", base, "fork"),
                     ff: ("ff", fork, "fork")}
    assert here[base][1] == there[base][1]  # the rotation's export holds all of it
    assert here[rotation][1] == there[rotation][1][:9]
    assert here[fork][1] == there[fork][1][:6]
    assert here[rotfork][1] == there[rotfork][1] and here[ff][1] == there[ff][1]


def test_a_fork_made_after_a_rewind_lends_its_parent_only_its_copies(
        tmp_path: Path, origin: Run, other: Run) -> None:
    """The parent held rewound rows: the fork point (a seq of the parent's, 37) is above
    every seq of the fork, whose own messages are not the parent's."""
    base = ok_json(origin("import", str(SAMPLE), "--title", "base", "--json"))["session_id"]
    assert origin("sessions", "rewind", "base", "--at", "2").exit_code == 0
    alt = _lines(tmp_path / "alt.jsonl", "another opening question")
    assert origin("import", str(alt), "--session", "base").exit_code == 0
    fork = ok_json(origin("sessions", "fork", "base", "--title", "rf", "--json"))
    assert fork["fork_seq"] == 37
    own = _lines(tmp_path / "own.jsonl", "the fork's own question", "and another")
    assert origin("import", str(own), "--session", "rf").exit_code == 0
    there = _sessions(tmp_path, "a")

    _reports(other("import", str(_export(tmp_path, origin, "rf")), "--json"))
    here = _sessions(tmp_path, "b")
    assert here[base][1] == there[base][1] and len(here[base][1]) == 2
    assert here[fork["id"]][0].parent_session_id == base
    assert here[fork["id"]][1] == there[fork["id"]][1]


def test_exported_again_from_where_it_was_imported(tmp_path: Path, origin: Run, other: Run,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The fork imported starts when it was made there, after the messages it copied were
    said: exported again from here, its copies are told from its own messages as there."""
    base, fork = _fork_with_turns(tmp_path, origin)
    _reports(other("import", str(_export(tmp_path, origin, "fork5")), "--json"))
    here = _sessions(tmp_path, "b")
    assert here[fork][0].started_at == _sessions(tmp_path, "a")[fork][0].started_at
    (tmp_path / "c").mkdir()
    third = cli_on_home(tmp_path / "c", monkeypatch)
    _reports(third("import", str(_export(tmp_path / "b", other, "fork5")), "--json"))
    last = _sessions(tmp_path, "c")
    assert {k: rows for k, (_, rows) in last.items()} == \
        {k: rows for k, (_, rows) in here.items()}
    assert last[fork][0].parent_session_id == base and len(last[base][1]) == 5


def test_a_stored_parent_is_left_as_it_is(tmp_path: Path, origin: Run, other: Run) -> None:
    """Where the parent is stored already and went on otherwise, the export's copies are not
    synced into it as its history (that rewound what it holds after them)."""
    base, fork = _fork_with_turns(tmp_path, origin)
    export = _export(tmp_path, origin, "fork5")
    assert origin("sessions", "rm", "fork5", "--yes").exit_code == 0
    assert origin("sessions", "rewind", "base", "--at", "2").exit_code == 0
    alt = _lines(tmp_path / "alt.jsonl", "another opening question")
    assert origin("import", str(alt), "--session", "base").exit_code == 0
    before = _sessions(tmp_path, "a")[base][1]

    reports = _reports(origin("import", str(export), "--json"))
    assert (reports[0]["appended"], reports[0]["left_as_is"]) == (0, 4)
    assert all(r["rewound"] == 0 for r in reports)
    after = _sessions(tmp_path, "a")
    assert after[base][1] == before
    assert (after[fork][0].parent_session_id, after[fork][0].link_kind) == (base, "fork")


def test_a_link_that_cannot_be_kept_is_said(tmp_path: Path, origin: Run, other: Run) -> None:
    base, fork = _fork_with_turns(tmp_path, origin)
    alone = tmp_path / "alone.json"  # no --lineage: its parent is not in it
    assert origin("sessions", "export", "fork5", "--format", "json", "-o",
                  str(alone)).exit_code == 0
    said = other("import", str(alone))
    assert said.exit_code == 0, said.output
    assert f"not linked to its parent {base} (fork): that session is not here" in said.stdout
    assert _sessions(tmp_path, "b")[fork][0].parent_session_id is None
    report = _reports(other("import", str(alone), "--json"))[0]  # again: stored unlinked
    assert report["appended"] == 0
    assert report["not_linked"] == {"parent": base, "link": "fork", "why": "stored",
                                    "stored_parent": None}
    # its lineage export later: the parent is not made up beside a fork that stays unlinked
    again = _reports(other("import", str(_export(tmp_path, origin, "fork5")), "--json"))
    assert [r["session_id"] for r in again] == [fork]
    assert again[0]["not_linked"]["why"] == "stored"
    assert set(_sessions(tmp_path, "b")) == {fork}


def test_a_rotation_whose_parent_is_not_there_says_so(tmp_path: Path, origin: Run,
                                                       other: Run) -> None:
    base = ok_json(origin("import", str(SAMPLE), "--title", "base", "--json"))["session_id"]
    rotated = origin("sessions", "compact", "base", "--context-length", "4000", "--rotate")
    assert rotated.exit_code == 0, rotated.output
    alone = tmp_path / "alone.json"
    assert origin("sessions", "export", "base #2", "--format", "json", "-o",
                  str(alone)).exit_code == 0
    report = _reports(other("import", str(alone), "--json"))[0]
    assert report["appended"] == 15
    assert report["not_linked"] == {"parent": base, "link": "compaction", "why": "missing"}


def test_a_branch_sharing_nothing_with_its_parent_says_it_is_unlinked(
        tmp_path: Path, origin: Run, other: Run) -> None:
    """A branch the proxy started for a conversation sharing nothing with the session (no
    copies, no fork point): nothing of its parent can stand in for it."""
    store = SQLiteStore(str(tmp_path / "a" / "home" / "refold.db"))
    try:
        root = store.create_session(title="conv")
        store.append_messages(root.id, [{"role": "user", "content": "hello"}])
        side = store.create_session(title="conv #2", parent_session_id=root.id,
                                    link_kind="branch")
        store.append_messages(side.id, [{"role": "user", "content": "a side question"}])
    finally:
        store.close()
    report = _reports(other("import", str(_export(tmp_path, origin, "conv #2")), "--json"))
    assert [(r["session_id"], r["appended"]) for r in report] == [(side.id, 1)]
    assert report[0]["not_linked"] == {"parent": root.id, "link": "branch", "why": "missing"}


def test_session_and_title_still_take_a_forks_lineage_export(tmp_path: Path, origin: Run,
                                                             other: Run) -> None:
    """They name the session the fork's messages go to: its parent's copies are not a
    second session with messages that refuses them."""
    _, fork = _fork_with_turns(tmp_path, origin)
    export = _export(tmp_path, origin, "fork5")
    report = _reports(other("import", str(export), "--title", "mine", "--json"))
    assert [(r["session_id"], r["title"], r["appended"]) for r in report] == [(fork, "mine", 6)]


def test_links_that_go_round_in_a_circle_end(tmp_path: Path, other: Run) -> None:
    """A hand-made export whose sessions' fork links form a circle: read, not looped over."""
    message = {"seq": 1, "active": True, "created_at": 1.7e9,
               "message": {"role": "user", "content": "hello"}}
    doc = {"format": "refold.export/1", "sessions": [
        {"id": "a" * 32, "parent_session_id": "b" * 32, "link_kind": "fork", "fork_seq": 1,
         "messages": []},
        {"id": "b" * 32, "parent_session_id": "a" * 32, "link_kind": "fork", "fork_seq": 1,
         "messages": []},
        {"id": "c" * 32, "title": "held", "messages": [message]}]}
    path = tmp_path / "circle.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    report = _reports(other("import", str(path), "--json"))
    assert [(r["session_id"], r["appended"]) for r in report] == [("c" * 32, 1)]
