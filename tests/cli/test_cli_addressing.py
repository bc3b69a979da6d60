"""Sessions you can address (issue 14): rewinds listed after the fact, ``show --limit/--tail``
with active counts, and ledger text that cannot drive the terminal (both backends)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

from refold.cli.main import cli
from refold.cli.terminal import safe_text
from refold.store import Store


def db_url(store: Store) -> str:
    schema = getattr(store, "schema", None)
    if schema is None or "schema=" in store.url:
        return store.url
    return f"{store.url}{'&' if '?' in store.url else '?'}schema={schema}"


def run(store: Store, home: Path, *args: str) -> Result:
    result = CliRunner().invoke(cli, ["--home", str(home), "--db", db_url(store), *args])
    assert result.exit_code == 0, (result.output, result.exception)
    return result


def _session(store: Store, n: int = 10) -> str:
    session = store.create_session(title="long")
    store.append_messages(session.id, [
        {"role": "user" if i % 2 else "assistant", "content": f"message {i}"}
        for i in range(1, n + 1)])
    return session.id


def test_rewinds_are_listed_after_the_fact(store: Store, tmp_path: Path) -> None:
    sid = _session(store)
    record = store.rewind(sid, 7)
    rows = json.loads(run(store, tmp_path, "sessions", "rewinds", "long", "--json").output)
    assert [(r["id"], r["from_seq"], r["count"], r["undone"]) for r in rows] == \
        [(record.id, 7, 4, False)]
    assert rows[0]["inactive_seqs"] == [7, 8, 9, 10]
    text = run(store, tmp_path, "sessions", "rewinds", "long").output
    assert f"undo-rewind {record.id}" in text
    store.undo_rewind(record.id)
    again = json.loads(run(store, tmp_path, "sessions", "rewinds", "long", "--json").output)
    assert again[0]["undone"] is True


def test_show_limit_tail_and_active_counts(store: Store, tmp_path: Path) -> None:
    sid = _session(store)
    store.rewind(sid, 9)
    head = json.loads(run(store, tmp_path, "sessions", "show", "long", "--limit", "3",
                          "--json").output)
    assert [m["seq"] for m in head["messages"]] == [1, 2, 3]
    assert head["counts"] == {"active": 8, "stored": 10, "listed": 8}
    tail = json.loads(run(store, tmp_path, "sessions", "show", "long", "--tail", "2",
                          "--json").output)
    assert [m["seq"] for m in tail["messages"]] == [7, 8]
    every = json.loads(run(store, tmp_path, "sessions", "show", "long", "--tail", "3", "--all",
                           "--json").output)
    assert [m["seq"] for m in every["messages"]] == [8, 9, 10]
    text = run(store, tmp_path, "sessions", "show", "long", "--tail", "2").output
    assert "8 active of 10 stored" in text and "showing 2" in text and "#1 " not in text


def test_terminal_output_neutralizes_control_sequences(store: Store, tmp_path: Path) -> None:
    hostile = "before\x1b[2J\x1b]0;pwned\x07after\rover \u202eevil"
    session = store.create_session(title="esc")
    store.append_messages(session.id, [{"role": "user", "content": hostile}])
    text = run(store, tmp_path, "sessions", "show", "esc").output
    assert "\x1b" not in text and "\x07" not in text and "\r" not in text
    assert "\u202e" not in text
    assert "before\\x1b[2J\\x1b]0;pwned\\x07after\\x0dover \\u202eevil" in text
    found = run(store, tmp_path, "search", "pwned").output
    assert "\x1b" not in found and "\x07" not in found
    exact = json.loads(run(store, tmp_path, "sessions", "show", "esc", "--json").output)
    assert exact["messages"][0]["message"]["content"] == hostile  # JSON stays exact


def test_safe_text_keeps_newlines_tabs_and_printable_text() -> None:
    assert safe_text("a\tb\n退款 🙂") == "a\tb\n退款 🙂"
    assert safe_text("\x9b31m") == "\\x9b31m"


def test_a_reference_that_is_not_utf8_is_no_traceback(store: Store, tmp_path: Path) -> None:
    """`refold sessions show café` typed in a Latin-1 terminal reaches Python as a lone
    surrogate: binding it ended the lookup in a UnicodeEncodeError traceback (the CLI, the
    session_search tool). It names no session; an import stores it with U+FFFD."""
    from refold.errors import NotFound
    from refold.tools import ToolRegistry, session_search_tool

    _session(store)
    shown = CliRunner().invoke(cli, ["--home", str(tmp_path), "--db", db_url(store),
                                     "sessions", "show", "caf\udce9"])
    assert isinstance(shown.exception, NotFound), shown.exception
    assert "no session matches 'caf\ufffd'" in str(shown.exception)
    sample = Path(__file__).resolve().parents[2] / "src/refold/data/sample_session.jsonl"
    imported = json.loads(run(store, tmp_path, "import", str(sample), "--session", "caf\udce9",
                              "--title", "caf\udce9 t", "--json").output)
    assert imported["session_id"] == "caf\ufffd" and imported["appended"] == 36
    assert store.get_session("caf\ufffd").title == "caf\ufffd t"
    tool = ToolRegistry([session_search_tool(store, owner=None)])
    answer = tool.run("session_search", {"mode": "read", "session_id": "x\udce9"})
    assert answer.is_error and "no session" in json.loads(answer.text)["error"], answer


def _import(store: Store, home: Path, path: Path, *args: str) -> dict[str, object]:
    result = run(store, home, "import", str(path), "--json", *args)
    return dict(json.loads(result.output))


def _transcript(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([{"role": "user", "content": text},
                                {"role": "assistant", "content": "ok"}]), encoding="utf-8")
    return path


def test_deleting_a_name_twice_never_deletes_a_numbered_namesake(store: Store,
                                                                  tmp_path: Path) -> None:
    """Two unrelated files called notes.json: the second import is titled "notes #2". Deleting
    "notes" twice deletes "notes", then says no session matches: "notes #2" shares only the
    name (a rename or a delete must never reach it); shown and searched, the name still finds
    the lineage's newest."""
    home = tmp_path / "home"
    _import(store, home, _transcript(tmp_path / "work" / "notes.json", "quarterly roadmap"))
    other = _import(store, home, _transcript(tmp_path / "home" / "notes.json", "mortgage"))
    assert other["title"] == "notes #2"
    run(store, home, "sessions", "rm", "notes", "--yes")
    again = CliRunner().invoke(cli, ["--home", str(home), "--db", db_url(store),
                                     "sessions", "rm", "notes", "--yes"])
    assert again.exit_code != 0
    assert "no session matches 'notes'" in again.output + str(again.exception)
    for command in (["rename", "notes", "x"], ["rewind", "notes", "1"]):
        refused = CliRunner().invoke(cli, ["--home", str(home), "--db", db_url(store),
                                           "sessions", *command])
        assert refused.exit_code != 0, command
    assert store.get_session(str(other["session_id"])).title == "notes #2"
    assert len(store.get_messages(str(other["session_id"]))) == 2
    assert store.resolve_session("notes").id == other["session_id"]  # reading: the newest


def test_import_session_name_is_an_exact_id_or_title_or_a_shown_id_prefix(
        store: Store, tmp_path: Path) -> None:
    """``import --session NAME``: a short NAME that begins an unrelated session's id creates a
    session titled NAME instead of appending to that one; the 8-character id ``sessions
    list`` shows, the exact title and the whole id still append."""
    home = tmp_path / "home"
    pool = _import(store, home, _transcript(tmp_path / "pool.json", "connection pool size"))
    pool_id = str(pool["session_id"])
    offsite = _transcript(tmp_path / "offsite.json", "plan the offsite in Lisbon")
    created = _import(store, home, offsite, "--session", pool_id[:1])
    assert created["session_id"] != pool_id and created["title"] == pool_id[:1]
    assert len(store.get_messages(pool_id)) == 2  # untouched
    named = _import(store, home, offsite, "--session", "offsite-2026")
    assert named["title"] == "offsite-2026"
    for ref in (pool_id[:8], "pool", pool_id):
        more = _transcript(tmp_path / f"more-{len(ref)}.json", f"follow-up {len(ref)}")
        assert _import(store, home, more, "--session", ref)["session_id"] == pool_id
    assert len(store.get_messages(pool_id)) == 8
