"""``refold sessions …`` and ``refold doctor`` through click's runner on the real SQLite store."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from refold.cli.main import cli
from refold.errors import AmbiguousReference, InvalidInput, NotFound

SAMPLE = Path(__file__).resolve().parents[2] / "src" / "refold" / "data" / "sample_session.jsonl"

Run = Callable[..., Result]


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Run:
    for name in ("REFOLD_HOME", "REFOLD_DB"):
        monkeypatch.delenv(name, raising=False)

    def invoke(*args: str, input: str | None = None) -> Result:
        return CliRunner().invoke(cli, ["--home", str(tmp_path / "home"), *args], input=input)
    return invoke


def ok(result: Result) -> str:
    assert result.exit_code == 0, (result.output, result.exception)
    return result.output


def ok_json(result: Result) -> Any:
    return json.loads(ok(result))


@pytest.fixture
def sid(run: Run) -> str:
    return str(ok_json(run("import", str(SAMPLE), "--json"))["session_id"])


def test_list_show_and_resolve_by_prefix_and_title(run: Run, sid: str) -> None:
    listed = ok_json(run("sessions", "list", "--json"))
    assert {"id", "title", "parent_session_id", "message_count"} <= set(listed[0])
    shown = ok_json(run("sessions", "show", sid[:8], "--json"))
    assert shown["session"]["id"] == sid
    assert [m["seq"] for m in shown["messages"]] == sorted(m["seq"] for m in shown["messages"])
    assert shown["messages"][2]["message"]["tool_calls"][0]["id"] == "call_01"
    text = ok(run("sessions", "show", "sample_session"))
    assert "#2 user" in text and "→ read_file" in text and "已修复并通过测试" in text
    assert "sample_session" in ok(run("sessions", "list"))


def test_a_filter_that_matches_nothing_does_not_say_the_archive_is_empty(run: Run,
                                                                        sid: str) -> None:
    out = ok(run("sessions", "list", "--source", "nope"))
    assert "no sessions with source 'nope'" in out and "yet" not in out


def test_unknown_session_is_not_found(run: Run, sid: str) -> None:
    result = run("sessions", "show", "no-such-session")
    assert isinstance(result.exception, NotFound)


def test_rename_fork_resume(run: Run, sid: str) -> None:
    renamed = ok_json(run("sessions", "rename", sid, "修复 checkout 500", "--json"))
    assert renamed["title"] == "修复 checkout 500"
    fork = ok_json(run("sessions", "fork", "修复 checkout 500", "--at", "10", "--json"))
    assert fork["parent_session_id"] == sid and fork["link_kind"] == "fork"
    assert fork["message_count"] == 10
    branch = ok_json(run("sessions", "fork", sid, "--branch", "--title", "alt", "--json"))
    assert branch["link_kind"] == "branch" and branch["title"] == "alt"
    resumed = ok_json(run("sessions", "resume", sid, "--json"))
    assert resumed["id"] == sid  # forks and branches are not compaction continuations
    newest = ok_json(run("sessions", "resume", "--json"))
    assert newest["id"] in {sid, fork["id"], branch["id"]}
    assert sid in ok(run("sessions", "resume", sid))


def test_rewind_and_undo(run: Run, sid: str) -> None:
    shown = ok_json(run("sessions", "show", sid, "--json"))
    last_user = max(m["seq"] for m in shown["messages"] if m["role"] == "user")
    record = ok_json(run("sessions", "rewind", sid, "--at", str(last_user), "--json"))
    assert record["from_seq"] == last_user and record["count"] >= 1
    active = ok_json(run("sessions", "show", sid, "--json"))["messages"]
    assert max(m["seq"] for m in active) < last_user
    every = ok_json(run("sessions", "show", sid, "--all", "--json"))["messages"]
    assert len(every) == 36 and not every[-1]["active"]
    assert "rewound" in ok(run("sessions", "show", sid, "--all"))
    restored = ok_json(run("sessions", "undo-rewind", str(record["id"]), "--json"))
    assert restored["undone"] is True
    assert len(ok_json(run("sessions", "show", sid, "--json"))["messages"]) == 36


def test_a_rewind_that_cannot_be_undone_says_how_to_reach_its_messages(
        run: Run, sid: str, tmp_path: Path) -> None:
    """Its hint said to fork at the rewound message, which fork refuses (not active). A rewind
    whose earlier messages were rewound since cannot come back (what it followed is gone)."""
    record = ok_json(run("sessions", "rewind", sid, "--at", "30", "--json"))
    ok(run("sessions", "rewind", sid, "--at", "2"))
    refused = run("sessions", "undo-rewind", str(record["id"]))
    assert refused.exit_code != 0 and f"refold sessions show {sid} --all" in str(
        refused.exception.hint)  # type: ignore[union-attr]
    shown = ok_json(run("sessions", "show", sid, "--all", "--json"))["messages"]
    assert len(shown) == 36 and sum(1 for m in shown if m["active"]) == 1  # all kept


def test_rm_needs_confirmation_and_removes(run: Run, sid: str) -> None:
    refused = run("sessions", "rm", sid)  # no tty and no --yes
    assert isinstance(refused.exception, InvalidInput) and "--yes" in str(refused.exception)
    assert "deleted session" in ok(run("sessions", "rm", sid, "--yes"))
    assert ok_json(run("sessions", "list", "--json")) == []


def test_prune_keeps_sessions_that_have_not_ended(run: Run, sid: str) -> None:
    out = ok_json(run("sessions", "prune", "--older-than", "0", "--yes", "--json"))
    assert (out["deleted_sessions"], out["lineages"]) == (0, [])
    assert len(ok_json(run("sessions", "list", "--json"))) == 1


def test_ambiguous_prefix(run: Run, tmp_path: Path) -> None:
    for name in ("abc1", "abc2"):
        path = tmp_path / f"{name}.jsonl"
        path.write_text(json.dumps({"role": "user", "content": name}) + "\n", encoding="utf-8")
        ok(run("import", str(path), "--session", name))
    result = run("sessions", "show", "abc")
    assert isinstance(result.exception, AmbiguousReference)


def test_doctor_json_and_text(run: Run, sid: str, tmp_path: Path) -> None:
    report = ok_json(run("doctor", "--json"))
    assert report["ok"] is True
    assert report["features"] == {"fts5": True, "fts5_trigram": True}
    assert report["paths"]["db"] == str(tmp_path / "home" / "refold.db")
    assert report["database"]["problems"] == []
    assert report["versions"]["refold"]
    assert "integrity" in ok(run("doctor"))


def test_doctor_reports_a_corrupt_database(run: Run, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "refold.db").write_bytes(b"this is not a database" * 100)
    result = run("doctor", "--json")
    assert result.exit_code == 1
    report = json.loads(result.output)
    assert report["ok"] is False and report["database"]["ok"] is False


def test_export_jsonl_is_openai_messages_and_reimports(run: Run, sid: str,
                                                       tmp_path: Path) -> None:
    out = ok(run("sessions", "export", sid))
    lines = [json.loads(line) for line in out.splitlines()]
    original = [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines()]
    assert lines == original
    target = tmp_path / "copy.jsonl"
    assert "wrote 36 message(s)" in ok(run("sessions", "export", sid, "-o", str(target)))
    again = ok_json(run("import", str(target), "--json"))
    assert again["session_id"] == sid and again["appended"] == 0


def test_export_json_markdown_lineage_and_archived(run: Run, sid: str) -> None:
    fork = ok_json(run("sessions", "fork", sid, "--at", "3", "--json"))
    ok(run("import", "-", "--session", fork["id"],
           input=json.dumps({"role": "user", "content": "fork-only question"})))
    doc = ok_json(run("sessions", "export", fork["id"], "--format", "json", "--lineage"))
    assert [s["id"] for s in doc["sessions"]] == [sid, fork["id"]]
    md = ok(run("sessions", "export", fork["id"], "--format", "md"))
    assert "fork-only question" in md
    shown = ok_json(run("sessions", "show", sid, "--json"))["messages"]
    user_seq = max(m["seq"] for m in shown if m["role"] == "user")
    ok(run("sessions", "rewind", sid, "--at", str(user_seq)))
    plain = ok(run("sessions", "export", sid)).splitlines()
    archived = ok(run("sessions", "export", sid, "--archived")).splitlines()
    assert len(plain) < len(archived) == 36


def test_show_and_search_name_each_speaker_of_a_group_chat(run: Run, tmp_path: Path) -> None:
    chat = tmp_path / "chat.jsonl"
    chat.write_text(
        json.dumps({"role": "user", "name": "Caroline",
                    "content": "I went to a support group yesterday"}) + "\n"
        + json.dumps({"role": "assistant", "name": "Melanie",
                      "content": "That's great, Caroline!"}) + "\n", encoding="utf-8")
    ok(run("import", str(chat), "--title", "group chat"))
    shown = ok(run("sessions", "show", "group chat"))
    assert "#1 user (Caroline)" in shown and "#2 assistant (Melanie)" in shown
    [hit, *_] = ok_json(run("search", "What did Caroline say about the support group?",
                            "--json"))
    assert hit["seq"] == 1 and hit["content"].startswith("Caroline: I went")
