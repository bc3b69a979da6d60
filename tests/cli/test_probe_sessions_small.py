"""``sessions rename`` with a title over 100 characters cut it to 100 and exited 0 (the proxy
refuses such a title with a 400): refused. ``sessions list``'s count column counts every
stored row, rewound ones included, so it is headed "stored" (``show`` says how many are
active); it stays a column the sessions table keeps, never a count over every message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from import_cli import Run, cli_on_home, ok_json

from refold.errors import InvalidInput


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Run:
    return cli_on_home(tmp_path, monkeypatch)


@pytest.fixture
def session(run: Run, tmp_path: Path) -> str:
    path = tmp_path / "t.json"
    path.write_text(json.dumps([{"role": "user" if i % 2 == 0 else "assistant",
                                 "content": f"m{i}"} for i in range(8)]))
    return str(ok_json(run("import", str(path), "--json"))["session_id"])


def test_a_title_over_100_characters_is_refused(run: Run, session: str) -> None:
    before = ok_json(run("sessions", "show", session, "--json"))["session"]["title"]
    result = run("sessions", "rename", session, "x" * 300)
    assert isinstance(result.exception, InvalidInput), result.output  # exit status 2
    assert "300 characters long" in str(result.exception)
    assert "at most 100" in str(result.exception)
    assert ok_json(run("sessions", "show", session, "--json"))["session"]["title"] == before
    renamed = ok_json(run("sessions", "rename", session, "y" * 100, "--json"))
    assert renamed["title"] == "y" * 100
    spaced = ok_json(run("sessions", "rename", session, "a" + " " * 150 + "b", "--json"))
    assert spaced["title"] == "a b"  # white space runs count as one, as stored


def test_the_list_column_says_it_counts_stored_rows(run: Run, session: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    assert run("sessions", "rewind", session, "--at", "5").exit_code == 0
    monkeypatch.setenv("COLUMNS", "120")
    lines = run("sessions", "list").stdout.splitlines()
    assert lines[0].split()[:3] == ["id", "title", "stored"], lines
    assert lines[1].split()[2] == "8"
    shown = run("sessions", "show", session).stdout.splitlines()[0]
    assert "4 active of 8 stored" in shown
    assert ok_json(run("sessions", "list", "--json"))[0]["message_count"] == 8


def test_a_title_an_import_of_a_stored_transcript_cannot_use_is_said(
        run: Run, session: str, tmp_path: Path) -> None:
    """``import FILE --title D`` of a transcript already stored (in session C) went to C and
    dropped the title without a word."""
    title = ok_json(run("sessions", "show", session, "--json"))["session"]["title"]
    again = ok_json(run("import", str(tmp_path / "t.json"), "--title", "D", "--json"))
    assert again["session_id"] == session and again["title"] == title
    assert again["title_not_used"] == "D"
    said = run("import", str(tmp_path / "t.json"), "--title", "D")
    assert said.exit_code == 0 and "--title 'D' not used" in said.output
    quiet = ok_json(run("import", str(tmp_path / "t.json"), "--title", title, "--json"))
    assert "title_not_used" not in quiet


def test_a_session_the_proxy_named_shows_what_it_began_with(
        run: Run, tmp_path: Path) -> None:
    """A conversation that reaches ``refold serve`` without X-Refold-Session is named
    ``conv-`` and a hash: ``sessions list`` showed only that, which tells nobody which
    conversation it is."""
    from refold.server.sessions import derived_ref

    history = [{"role": "system", "content": "be brief"},
               {"role": "user", "content": "Why does   the nightly ETL job fail on Sundays? "
                                           "It worked until the 3rd of May."},
               {"role": "assistant", "content": "Let me look."}]
    name = derived_ref("", history)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(history))
    ok_json(run("import", str(path), "--session", name, "--json"))
    listed = ok_json(run("sessions", "list", "--json"))
    assert [r["opening"] for r in listed if r["title"] == name] == [
        "Why does the nightly ETL job fail on Sundays? It worked unti…"]
    shown = run("sessions", "list")
    assert "“Why does the nightly ETL job" in shown.output.replace("\n", " ")
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps([{"role": "user", "content": "Rotate the ETL logs weekly."}]))
    ok_json(run("import", str(plain), "--title", "etl", "--json"))
    titled = [r for r in ok_json(run("sessions", "list", "--json")) if r["title"] == "etl"]
    assert len(titled) == 1 and "opening" not in titled[0]  # a title of its own: as it is


def test_memory_replace_and_remove_say_which_whole_entry_went(run: Run) -> None:
    """OLD_TEXT matches by a part of an entry: ``memory replace tea coffee`` replaced the
    whole "User likes tea with milk" with "coffee", and the output did not show what went."""
    assert run("memory", "add", "-t", "user", "User likes tea with milk").exit_code == 0
    replaced = run("memory", "replace", "-t", "user", "tea", "User likes coffee")
    assert replaced.exit_code == 0, replaced.output
    assert "replaced: User likes tea with milk" in replaced.output
    removed = run("memory", "remove", "-t", "user", "coffee")
    assert removed.exit_code == 0 and "removed: User likes coffee" in removed.output


def test_an_agents_proxied_session_shows_the_request_not_its_wrapping(
        run: Run, tmp_path: Path) -> None:
    """Claude Code opens each user message with a <system-reminder> block and Codex sends an
    <environment_context> message first: every session they sent through ``refold serve``
    was listed as “<system-reminder> As you answer the user's questions, you ca…” or
    “<environment_context> <cwd>…”, and a branch (``conv-… #2``) with no opening at all."""
    from refold.server.sessions import derived_ref

    claude = [{"role": "user", "content": [
        {"type": "text", "text": "<system-reminder>\nAs you answer the user's questions, "
                                 "you can use the following context\n</system-reminder>\n"},
        {"type": "text", "text": "Read README.txt and   run the tests"}]},
        {"role": "assistant", "content": "On it."}]
    codex = [{"role": "user", "content": "<environment_context>\n  <cwd>/work/app</cwd>\n"
                                         "</environment_context>"},
             {"role": "user", "content": "fix the failing test in app.py"},
             {"role": "assistant", "content": "Looking."}]
    names = []
    for n, history in enumerate((claude, codex)):
        names.append(derived_ref("", history))
        path = tmp_path / f"h{n}.json"
        path.write_text(json.dumps(history))
        ok_json(run("import", str(path), "--session", names[-1], "--json"))
    branch = f"{names[1]} #2"
    path = tmp_path / "branch.json"
    path.write_text(json.dumps([*codex[:2], {"role": "assistant", "content": "Again."}]))
    ok_json(run("import", str(path), "--title", branch, "--json"))
    listed = {r["title"]: r.get("opening") for r in ok_json(run("sessions", "list", "--json"))}
    assert listed[names[0]] == "Read README.txt and run the tests"
    assert listed[names[1]] == listed[branch] == "fix the failing test in app.py"
