"""``refold import`` reads refold's own JSON export (``refold sessions export --format json``):
each exported session with messages is imported as a session, named by its id there and titled
as it was; rewound rows (``--archived``) are left out and counted; importing it again, or back
where it came from, stores nothing twice."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from import_cli import SAMPLE, Run, cli_on_home, ok_json, stored_messages

from refold.errors import InvalidInput
from refold.store.sqlite import SQLiteStore


def _wire(base: Path, session_id: str) -> list[tuple[dict[str, Any], float]]:
    return [(m.message, m.created_at) for m in stored_messages(base, session_id)]


def _say(store: SQLiteStore, session_id: str, *texts: str) -> None:
    store.append_messages(session_id, [{"role": "user" if i % 2 == 0 else "assistant",
                                        "content": text} for i, text in enumerate(texts)])


def test_import_reads_its_own_json_export(tmp_path: Path, origin: Run, other: Run) -> None:
    first = ok_json(origin("import", str(SAMPLE), "--json"))
    export = tmp_path / "d9.json"
    assert origin("sessions", "export", "sample_session", "--format", "json",
                  "-o", str(export)).exit_code == 0

    report = ok_json(other("import", str(export), "--json"))
    assert report == {"session_id": first["session_id"], "title": "sample_session",
                      "appended": 36, "skipped": 0, "rewound": 0}
    # the same messages, said when they were said there
    assert _wire(tmp_path / "b", report["session_id"]) == \
        _wire(tmp_path / "a", first["session_id"])

    again = ok_json(other("import", str(export), "--json"))
    assert (again["session_id"], again["appended"], again["skipped"]) == \
        (first["session_id"], 0, 36)
    back = ok_json(origin("import", str(export), "--json"))  # where it came from
    assert (back["session_id"], back["appended"], back["skipped"]) == \
        (first["session_id"], 0, 36)
    for run in (origin, other):
        assert [(s["id"], s["message_count"]) for s in ok_json(
            run("sessions", "list", "--json"))] == [(first["session_id"], 36)]


def test_a_lineage_export_imports_each_session_and_leaves_rewound_rows_out(
        tmp_path: Path, origin: Run, other: Run) -> None:
    store = SQLiteStore(str(tmp_path / "a" / "home" / "refold.db"))
    try:
        root = store.create_session(title="deploy", source="chat")
        _say(store, root.id, "deploy the api", "which port?", "try 9090", "ok, 9090")
        store.rewind(root.id, 3)  # "try 9090" and its reply: rewound, kept inactive
        _say(store, root.id, "use 8080")
        child = store.create_session(title="deploy #2", source="chat",
                                     parent_session_id=root.id, link_kind="compaction")
        _say(store, child.id, "summary: port 8080", "deployed on 8080")
        store.end_session(root.id, "compaction")
    finally:
        store.close()
    export = tmp_path / "lineage.json"
    assert origin("sessions", "export", child.id, "--format", "json", "--lineage",
                  "--archived", "-o", str(export)).exit_code == 0
    assert [r["active"] for r in json.loads(export.read_text())["sessions"][0]["messages"]] \
        == [True, True, False, False, True]

    result = other("import", str(export), "--json")
    reports = ok_json(result)
    assert [(r["session_id"], r["title"], r["appended"]) for r in reports] == \
        [(root.id, "deploy", 3), (child.id, "deploy #2", 2)]
    assert reports[0]["rewound_left_out"] == 2 and "rewound_left_out" not in reports[1]
    assert "left out 2 rewound message(s)" in result.stderr
    for session_id in (root.id, child.id):  # only the active history: the rewound turn is not
        assert _wire(tmp_path / "b", session_id) == [
            (m.message, m.created_at) for m in stored_messages(tmp_path / "a", session_id)]
    assert "try 9090" not in json.dumps([m.message for m in stored_messages(tmp_path / "b",
                                                                            root.id)])

    plain = other("import", str(export))
    assert plain.exit_code == 0, plain.output
    assert "2 session(s) of a refold export imported: 0 message(s) stored, 5 already stored" \
        in plain.stdout


def test_a_fork_lineage_imports_the_fork_with_its_parent(tmp_path: Path, origin: Run,
                                                         other: Run) -> None:
    store = SQLiteStore(str(tmp_path / "a" / "home" / "refold.db"))
    try:
        root = store.create_session(title="plan")
        _say(store, root.id, "plan the release", "step one", "and then?", "step two")
        fork = store.fork_session(root.id, 2, title="plan b")
    finally:
        store.close()
    export = tmp_path / "fork.json"
    assert origin("sessions", "export", fork.id, "--format", "json", "--lineage",
                  "-o", str(export)).exit_code == 0
    result = other("import", str(export), "--json")
    # the parent's messages are the fork's copies: the parent is imported as them (it was
    # left out, and the fork lost its link), and the fork stores them again as its own
    reports = ok_json(result)
    assert [(r["session_id"], r["title"], r["appended"]) for r in reports] == \
        [(root.id, "plan", 2), (fork.id, "plan b", 2)]
    assert reports[0]["copied_by"] == fork.id
    assert "left out" not in result.stderr
    store = SQLiteStore(str(tmp_path / "b" / "home" / "refold.db"))
    try:
        there = store.get_session(fork.id)
    finally:
        store.close()
    assert (there.parent_session_id, there.link_kind) == (root.id, "fork")


def test_session_and_title_refuse_a_multi_session_export(tmp_path: Path, origin: Run,
                                                         other: Run) -> None:
    store = SQLiteStore(str(tmp_path / "a" / "home" / "refold.db"))
    try:
        root = store.create_session(title="one")
        _say(store, root.id, "first", "reply")
        child = store.create_session(title="one #2", parent_session_id=root.id,
                                     link_kind="compaction")
        _say(store, child.id, "second", "reply")
    finally:
        store.close()
    export = tmp_path / "two.json"
    assert origin("sessions", "export", child.id, "--format", "json", "--lineage",
                  "-o", str(export)).exit_code == 0
    for option in (["--session", "mine"], ["--title", "mine"]):
        refused = other("import", str(export), *option)  # `refold` says it: error:, exit 2
        assert isinstance(refused.exception, InvalidInput)
        assert "--session and --title name one session" in str(refused.exception)
        assert "export of 2 sessions" in str(refused.exception)
    assert ok_json(other("sessions", "list", "--json")) == []

    one = tmp_path / "one.json"  # one session: --session appends it where it says
    assert origin("sessions", "export", root.id, "--format", "json", "-o", str(one)
                  ).exit_code == 0
    report = ok_json(other("import", str(one), "--session", "mine", "--json"))
    assert (report["session_id"], report["appended"]) == ("mine", 2)


def test_an_export_of_another_version_is_refused(tmp_path: Path, other: Run) -> None:
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps({"format": "refold.export/2", "sessions": []}))
    refused = other("import", str(newer))
    assert isinstance(refused.exception, InvalidInput)
    assert "refold.export/2" in str(refused.exception)


def test_an_export_imported_elsewhere_keeps_its_source_model_and_totals(
        tmp_path: Path, origin: Run, other: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    """An export carries where its session came from, its model and its usage totals: imported
    elsewhere they came back as source "import" and no tokens or cost. Imported again, or
    where it came from, nothing is counted twice; grown, only the growth is added; --source
    still names every session."""
    store = SQLiteStore(str(tmp_path / "a" / "home" / "refold.db"))
    try:
        made = store.create_session(title="served", source="serve", model="gpt-4o-mini")
        _say(store, made.id, "hello", "hi there")
        store.add_usage(made.id, input_tokens=1200, output_tokens=80, cost_usd=0.25)
    finally:
        store.close()
    export = tmp_path / "served.json"
    assert origin("sessions", "export", "served", "--format", "json",
                  "-o", str(export)).exit_code == 0

    def seen(run: Run) -> dict[str, Any]:
        found = ok_json(run("sessions", "list", "--json"))[0]
        return {k: found[k] for k in ("source", "model", "input_tokens", "output_tokens",
                                      "cost_usd")}

    want = {"source": "serve", "model": "gpt-4o-mini", "input_tokens": 1200,
            "output_tokens": 80, "cost_usd": pytest.approx(0.25)}
    for _ in range(2):
        ok_json(other("import", str(export), "--json"))
        assert seen(other) == want
    ok_json(origin("import", str(export), "--json"))  # where it came from: the same
    assert seen(origin) == want
    store = SQLiteStore(str(tmp_path / "a" / "home" / "refold.db"))
    try:
        _say(store, made.id, "one more", "sure")
        store.add_usage(made.id, input_tokens=300, cost_usd=0.05)
    finally:
        store.close()
    assert origin("sessions", "export", "served", "--format", "json", "--force",
                  "-o", str(export)).exit_code == 0
    grown = ok_json(other("import", str(export), "--json"))
    assert grown["appended"] == 2
    assert seen(other) == dict(want, input_tokens=1500, cost_usd=pytest.approx(0.30))
    (tmp_path / "c").mkdir()
    third = cli_on_home(tmp_path / "c", monkeypatch)
    ok_json(third("import", str(export), "--source", "mine", "--json"))
    assert seen(third)["source"] == "mine"


def test_a_jsonl_export_imported_back_where_it_came_from_stores_nothing_twice(
        tmp_path: Path, origin: Run) -> None:
    """The default export (JSONL: messages only, no session id) imported back into its own
    archive made a second session holding every message again (search then found each hit
    twice). It is the stored session's conversation: nothing new; a copy that the session
    went on after, or a grown plain transcript, appends only what is new, to that session."""
    first = ok_json(origin("import", str(SAMPLE), "--json"))
    export = tmp_path / "out.jsonl"
    assert origin("sessions", "export", "sample_session", "-o", str(export)).exit_code == 0
    for _ in range(2):
        back = ok_json(origin("import", str(export), "--json"))
        assert (back["session_id"], back["appended"], back["skipped"]) == \
            (first["session_id"], 0, 36)
    assert len(ok_json(origin("sessions", "list", "--json"))) == 1
    # a plain transcript imported, then imported again grown by a turn: one session
    lines = export.read_text().splitlines()
    short = tmp_path / "short.jsonl"
    short.write_text("\n".join(lines[:10]) + "\n")
    assert ok_json(origin("import", str(short), "--json"))["appended"] == 0  # a start of it
    plain = tmp_path / "plain.json"
    talk = [{"role": "user", "content": "plan the migration"},
            {"role": "assistant", "content": "step one: back up the tables"}]
    plain.write_text(json.dumps(talk))
    made = ok_json(origin("import", str(plain), "--json"))
    plain.write_text(json.dumps([*talk, {"role": "user", "content": "and then?"}]))
    grown = ok_json(origin("import", str(plain), "--json"))
    assert (grown["session_id"], grown["appended"], grown["skipped"]) == \
        (made["session_id"], 1, 2)
    assert len(ok_json(origin("sessions", "list", "--json"))) == 2


def test_importing_again_after_a_rewind_brings_the_rows_back_and_counts_nothing_twice(
        tmp_path: Path, origin: Run) -> None:
    """``sessions rewind`` then the same transcript imported again: its rewound messages
    were stored as copies and their tokens and cost added to the session a second time."""
    first = ok_json(origin("import", str(SAMPLE), "--json"))
    sid = first["session_id"]

    def totals() -> dict[str, Any]:
        found = ok_json(origin("sessions", "list", "--json"))
        assert len(found) == 1
        return {k: found[0][k] for k in ("message_count", "input_tokens", "output_tokens",
                                         "cost_usd")}

    before = totals()
    users = [m.seq for m in stored_messages(tmp_path / "a", sid) if m.role == "user"]
    assert origin("sessions", "rewind", sid[:8], "--at", str(users[-1])).exit_code == 0
    again = ok_json(origin("import", str(SAMPLE), "--json"))
    assert again["appended"] == 0 and again["restored"] == 36 - users[-1] + 1
    assert totals() == before
    store = SQLiteStore(str(tmp_path / "a" / "home" / "refold.db"))
    try:  # no copies, nothing left rewound
        every = store.get_messages(sid, include_inactive=True)
    finally:
        store.close()
    assert len(every) == 36 and all(m.active for m in every)
    text = origin("import", str(SAMPLE))
    assert text.exit_code == 0 and "brought back" not in text.output  # nothing held now
