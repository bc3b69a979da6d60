"""``refold import`` and ``refold search`` through click's runner on the real SQLite store."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from refold.cli.ledger import parse_time
from refold.cli.main import cli
from refold.store.sqlite import SQLiteStore

SAMPLE = Path(__file__).resolve().parents[2] / "src" / "refold" / "data" / "sample_session.jsonl"

Run = Callable[..., Result]


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Run:
    for name in ("REFOLD_HOME", "REFOLD_DB"):
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"

    def invoke(*args: str, input: str | None = None) -> Result:
        return CliRunner().invoke(cli, ["--home", str(home), *args], input=input,
                                  catch_exceptions=True)
    return invoke


def ok_json(result: Result) -> Any:
    assert result.exit_code == 0, (result.output, result.exception)
    return json.loads(result.output)


def rows(tmp_path: Path, session_id: str) -> list[tuple[int, str]]:
    store = SQLiteStore(str(tmp_path / "home" / "refold.db"))
    try:
        return [(m.seq, m.identity) for m in store.get_messages(session_id,
                                                                include_inactive=True)]
    finally:
        store.close()


def test_import_twice_appends_nothing_the_second_time(run: Run, tmp_path: Path) -> None:
    first = ok_json(run("import", str(SAMPLE), "--json"))
    assert first["appended"] == 36 and first["skipped"] == 0
    stored = rows(tmp_path, first["session_id"])
    second = ok_json(run("import", str(SAMPLE), "--json"))
    assert second == {**first, "appended": 0, "skipped": 36}
    assert rows(tmp_path, first["session_id"]) == stored
    sessions = ok_json(run("sessions", "list", "--json"))
    assert [s["id"] for s in sessions] == [first["session_id"]]
    assert sessions[0]["title"] == "sample_session"
    assert sessions[0]["message_count"] == 36


def test_import_into_named_session_appends_only_new_suffix(run: Run, tmp_path: Path) -> None:
    lines = SAMPLE.read_text(encoding="utf-8").splitlines()
    part = tmp_path / "part.jsonl"
    part.write_text("\n".join(lines[:10]) + "\n", encoding="utf-8")
    created = ok_json(run("import", str(part), "--session", "work-1", "--title", "工作 1",
                          "--source", "cli-test", "--json"))
    assert created == {"session_id": "work-1", "title": "工作 1", "appended": 10, "skipped": 0,
                       "rewound": 0}
    grown = ok_json(run("import", str(SAMPLE), "--session", "工作 1", "--json"))
    assert grown["session_id"] == "work-1"
    assert (grown["appended"], grown["skipped"]) == (26, 10)
    seqs = [seq for seq, _ in rows(tmp_path, "work-1")]
    assert len(seqs) == 36 and seqs == sorted(set(seqs))


def test_another_transcript_into_a_named_session_goes_after_its_history(
        run: Run, tmp_path: Path) -> None:
    """``--session`` says append: another transcript rewound every stored message (the
    history "diverged" at its first message) and the rewind could not be undone. It is added
    after the session's history; importing it again, or grown, adds only what is new; the
    session's own transcript still syncs as before."""
    lines = SAMPLE.read_text(encoding="utf-8").splitlines()
    other = tmp_path / "other.jsonl"
    other.write_text("\n".join(json.dumps({"role": r, "content": f"{r} {i} of another talk"})
                               for i, r in enumerate(["user", "assistant"] * 3)) + "\n",
                     encoding="utf-8")
    ok_json(run("import", str(SAMPLE), "--session", "notes", "--json"))
    added = ok_json(run("import", str(other), "--session", "notes", "--json"))
    assert (added["appended"], added["skipped"], added["rewound"]) == (6, 0, 0)
    assert added["added_after"] == 36
    found = run("search", "currency").output  # the first one stays found, in "notes"
    assert "notes" in found and "no matches" not in found
    again = ok_json(run("import", str(other), "--session", "notes", "--json"))
    assert (again["appended"], again["skipped"], again["rewound"]) == (0, 6, 0)
    grown = tmp_path / "grown.jsonl"
    grown.write_text(other.read_text(encoding="utf-8")
                     + json.dumps({"role": "user", "content": "one more"}) + "\n",
                     encoding="utf-8")
    more = ok_json(run("import", str(grown), "--session", "notes", "--json"))
    assert (more["appended"], more["skipped"], more["rewound"]) == (1, 6, 0)
    own = ok_json(run("import", str(SAMPLE), "--session", "notes", "--json"))
    assert (own["appended"], own["rewound"]) == (0, 0)
    stored = rows(tmp_path, "notes")
    assert len(stored) == 36 + 7 == len({identity for _, identity in stored})
    assert len(lines) == 36


def test_import_from_stdin_and_json_document(run: Run) -> None:
    doc = json.dumps({"messages": [{"role": "user", "content": "hello from stdin"}]})
    out = ok_json(run("import", "-", "--json", input=doc))
    assert out["appended"] == 1
    hits = ok_json(run("search", "stdin", "--json"))
    assert [h["session_id"] for h in hits] == [out["session_id"]]


def test_malformed_file_stores_nothing(run: Run, tmp_path: Path) -> None:
    lines = SAMPLE.read_text(encoding="utf-8").splitlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([*lines[:5], '{"role": "user"', *lines[5:]]) + "\n",
                   encoding="utf-8")
    result = run("import", str(bad), "--session", "s1")
    assert result.exit_code != 0
    assert "bad.jsonl line 6: not valid JSON" in str(result.exception)
    assert ok_json(run("sessions", "list", "--json")) == []


def test_search_json_fields_filters_and_cjk(run: Run) -> None:
    sid = ok_json(run("import", str(SAMPLE), "--json"))["session_id"]
    hits = ok_json(run("search", "currency", "--json", "--limit", "5"))
    assert hits and len(hits) <= 5
    for hit in hits:
        assert {"session_id", "seq", "role", "snippet", "content", "title", "created_at",
                "window"} <= set(hit)
        assert hit["session_id"] == sid and "currency" in hit["content"].lower()
    tools = ok_json(run("search", "currency", "--role", "tool", "--json"))
    assert tools and {h["role"] for h in tools} == {"tool"}
    two_chars = ok_json(run("search", "退款", "--json", "--window", "0"))
    assert two_chars and all("退款" in h["content"] for h in two_chars)
    assert all(h["window"] == [] for h in two_chars)
    assert all(1 <= len(h["window"]) <= 3 for h in hits)
    assert ok_json(run("search", "currency", "--since", "1d", "--json"))
    assert ok_json(run("search", "currency", "--until", "2000-01-01", "--json")) == []
    assert ok_json(run("search", "currency", "--session", "sample_session", "--json"))
    assert ok_json(run("search", "currency", "--source", "elsewhere", "--json")) == []


def test_search_hides_rewound_unless_all(run: Run) -> None:
    sid = ok_json(run("import", str(SAMPLE), "--json"))["session_id"]
    seq = next(h["seq"] for h in ok_json(run("search", "regression", "--role", "user",
                                             "--json")))
    ok_json(run("sessions", "rewind", sid, "--at", str(seq), "--json"))
    assert ok_json(run("search", "regression", "--json")) == []
    assert ok_json(run("search", "regression", "--all", "--json"))


def test_search_table_and_punctuation_query(run: Run) -> None:
    run("import", str(SAMPLE))
    table = run("search", "KeyError")
    assert table.exit_code == 0 and "sample_session" in table.output
    assert run("search", "***").output.strip() == "no matches"
    empty = run("search", "  ")
    assert empty.exit_code != 0


def test_parse_time() -> None:
    assert parse_time("2d", now=1_000_000.0) == 1_000_000.0 - 2 * 86400
    assert parse_time("90m", now=10_000.0) == 10_000.0 - 5400
    assert parse_time(None) is None
    assert parse_time("2026-01-31T00:00:00+00:00") == 1769817600.0
    with pytest.raises(Exception, match="not a date"):
        parse_time("yesterday")


def test_import_anthropic_transcript(run: Run) -> None:
    sample = SAMPLE.with_name("sample_anthropic.json")
    first = ok_json(run("import", str(sample), "--format", "anthropic", "--json"))
    assert first["appended"] == 16 and first["title"] == "sample_anthropic"
    again = ok_json(run("import", "-", "--format", "anthropic", "--json",
                        input=sample.read_text(encoding="utf-8")))
    assert again["session_id"] == first["session_id"] and again["appended"] == 0
    hits = ok_json(run("search", "OOMKilled", "--role", "tool", "--json"))
    assert hits and hits[0]["session_id"] == first["session_id"]
    wrong = run("import", str(sample))
    assert wrong.exit_code != 0 and "--format anthropic" in str(wrong.exception)


def test_import_into_ambiguous_reference_creates_nothing(run: Run, tmp_path: Path) -> None:
    from refold.errors import AmbiguousReference

    one = tmp_path / "one.jsonl"
    one.write_text('{"role": "user", "content": "one"}\n', encoding="utf-8")
    for sid in ("deploy-job-1", "deploy-job-2"):
        ok_json(run("import", str(one), "--session", sid, "--json"))
    result = run("import", str(one), "--session", "deploy-jo")  # a shown-length id prefix
    assert isinstance(result.exception, AmbiguousReference)
    assert sorted(s["id"] for s in ok_json(run("sessions", "list", "--json"))) == [
        "deploy-job-1", "deploy-job-2"]
    # shorter than the ids ``sessions list`` shows: a new session of that name, not an error
    created = ok_json(run("import", str(one), "--session", "job", "--json"))
    assert (created["session_id"], created["title"]) == ("job", "job")


def test_create_falls_back_to_a_session_created_concurrently(tmp_path: Path) -> None:
    from refold.cli.ledger import Target, _store_messages
    from refold.errors import Conflict
    from refold.store.base import SessionDraft

    message = [{"role": "user", "content": "hello"}]
    store = SQLiteStore(str(tmp_path / "r.db"))
    try:
        won = store.create_session(session_id="s1", title="taken", source="import")
        _store_messages(store, Target("s1", SessionDraft(title="other")), message)
        used = store.get_session("s1")  # created meanwhile: used as it is
        assert (used.title, used.message_count) == (won.title, 1)
        _store_messages(store, Target("s2", SessionDraft(title="taken")), message)
        untitled = store.get_session("s2")  # only the default title was taken: untitled
        assert untitled.title is None and store.get_messages("s2")[0].message == message[0]
        with pytest.raises(Conflict):
            _store_messages(store, Target("s3", SessionDraft(title="taken"), keep_title=True),
                            message)
    finally:
        store.close()


def test_import_dates_a_chat_export_by_its_own_times(run: Run, tmp_path: Path) -> None:
    """A chat export whose messages say when they were written: the ledger dates them so, a
    message without a time of its own takes the one before it, the keys stay in the stored
    message, and a question naming the day ranks that day's messages."""
    import datetime as dt

    may8 = dt.datetime(2023, 5, 8, 13, 56).timestamp()
    lines = [{"role": "user", "name": "Caroline", "timestamp": "2023-05-08T13:56:00",
              "content": "I went to the support group yesterday"},
             {"role": "assistant", "name": "Melanie", "content": "How was it?"},
             {"role": "user", "created_at": int((may8 + 86400) * 1000),  # milliseconds
              "content": "Painting with the kids today"}]
    chat = tmp_path / "chat.jsonl"
    chat.write_text("".join(json.dumps(m) + "\n" for m in lines), encoding="utf-8")
    report = ok_json(run("import", str(chat), "--json"))
    shown = ok_json(run("sessions", "show", report["session_id"], "--json"))
    assert [m["created_at"] for m in shown["messages"]] == [may8, may8, may8 + 86400]
    assert shown["session"]["started_at"] == may8
    assert shown["messages"][0]["message"]["timestamp"] == "2023-05-08T13:56:00"
    hits = ok_json(run("search", "what did Caroline do on 9 May 2023?", "--json"))
    assert hits[0]["seq"] == 3
    # no time of its own anywhere (a duration is not a date): stamped at import, as before
    plain = tmp_path / "plain.jsonl"
    plain.write_text(json.dumps({"role": "user", "content": "hi", "time": 0.53}) + "\n",
                     encoding="utf-8")
    before = dt.datetime.now().timestamp()
    report = ok_json(run("import", str(plain), "--json"))
    [message] = ok_json(run("sessions", "show", report["session_id"], "--json"))["messages"]
    assert message["created_at"] >= before - 1


def test_message_time_reads_numbers_strings_and_iso_dates() -> None:
    from refold.messages.load import message_time

    assert message_time({"created_at": 1683554200}) == 1683554200.0
    assert message_time({"timestamp": 1683554200500}) == 1683554200.5  # milliseconds
    assert message_time({"time": " 1683554200 "}) == 1683554200.0
    assert message_time({"date": "2023-05-08T13:56:00Z"}) == 1683554160.0
    assert message_time({"datetime": "2023-05-08T15:56:00+02:00"}) == 1683554160.0
    # as people and chat apps write dates, local time
    import datetime as dt

    may8 = dt.datetime(2023, 5, 8).timestamp()
    assert message_time({"timestamp": "1:56 pm on 8 May, 2023"}) == may8 + 13 * 3600 + 56 * 60
    assert message_time({"date": "8 May, 2023"}) == may8
    assert message_time({"time": "08.05.2023, 14:30"}) == may8 + 14.5 * 3600
    assert message_time({"time": "2023年5月8日 14:30"}) == may8 + 14.5 * 3600
    assert message_time({"time": "12:30 am on 8 May 2023"}) == may8 + 1800
    for bad in (True, 0.53, -5, 1e30, float("nan"), float("inf"), "yesterday", "13:56",
                "9999-01-01", [1], {"a": 1}, "",
                "03/04/2024",  # two readings: which day is not known
                "May 8th",  # no year
                "13:56 pm on 8 May 2023", "25:00 on 8 May 2023", "8 May 2023 10:61"):
        assert message_time({"timestamp": bad}) is None, bad
    assert message_time({"role": "user"}) is None


@pytest.mark.parametrize("key", ["timestamp", "date"])
def test_message_time_of_any_text_is_a_plausible_time_or_none(key: str) -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from refold.messages.load import EARLIEST, LATEST, message_time

    parts = st.sampled_from(["1:56", " pm", " on ", "8", " May", ", ", "2023", "31.12.9999",
                             "年", "月", "日", "/", ".", ":", "99", "0", "am", "12", "T", "Z"])

    @settings(max_examples=300, deadline=None)
    @given(st.one_of(st.text(), st.lists(parts, max_size=10).map("".join)))
    def check(text: str) -> None:
        found = message_time({key: text})
        assert found is None or EARLIEST < found < LATEST

    check()


def _day(path: Path, text: str) -> Path:
    path.write_text(json.dumps({"role": "user", "content": text}) + "\n"
                    + json.dumps({"role": "assistant", "content": f"done: {text}"}) + "\n",
                    encoding="utf-8")
    return path


def test_a_transcript_other_transcripts_followed_imports_again_as_nothing(
        run: Run, tmp_path: Path) -> None:
    """day 1 titled "journal", days 2 and 3 added with ``--session journal``: importing day 2
    again adds nothing (it is in the middle of the history, not at its end)."""
    days = [_day(tmp_path / f"day{n}.jsonl", f"day {n} work") for n in (1, 2, 3)]
    journal = ok_json(run("import", str(days[0]), "--title", "journal", "--json"))
    for day in days[1:]:
        ok_json(run("import", str(day), "--session", "journal", "--json"))
    again = ok_json(run("import", str(days[1]), "--session", "journal", "--json"))
    assert (again["appended"], again["skipped"], again["rewound"]) == (0, 2, 0)
    assert len(rows(tmp_path, journal["session_id"])) == 6  # stored once each, none rewound


def test_an_import_racing_another_into_one_session_rewinds_nothing(
        run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another import appends to the session between this import's read of it and its write
    (two ``import --session`` at once): the write sees a changed session, reads again and
    adds after both; nothing of the other import is rewound."""
    import refold.cli.ledger as ledger

    base = ok_json(run("import", str(_day(tmp_path / "base.jsonl", "start")), "--title",
                       "shared", "--json"))
    read = ledger._after_its_history
    raced: list[int] = []

    def racing(store: Any, session_id: str, *args: Any) -> Any:
        found = read(store, session_id, *args)
        if not raced:  # the other import commits right after this one read the session
            raced.append(1)
            store.append_messages(session_id, [{"role": "user", "content": "the other one"},
                                               {"role": "assistant", "content": "its reply"}])
        return found

    monkeypatch.setattr(ledger, "_after_its_history", racing)
    added = ok_json(run("import", str(_day(tmp_path / "mine.jsonl", "mine")), "--session",
                        "shared", "--json"))
    assert raced and (added["appended"], added["rewound"]) == (2, 0)
    assert len(rows(tmp_path, base["session_id"])) == 6  # start, the other's two, mine's two
    store = SQLiteStore(str(tmp_path / "home" / "refold.db"))
    try:
        assert len(store.get_messages(base["session_id"])) == 6  # all of them active
    finally:
        store.close()


def test_a_directorys_json_files_left_out_are_named(run: Run, tmp_path: Path) -> None:
    """A directory's ``.json`` files are read only as Gemini CLI sessions; the others were
    passed over without a word (a transcript exported as a JSON list looked imported)."""
    folder = tmp_path / "d"
    folder.mkdir()
    _day(folder / "x.jsonl", "in a jsonl")
    (folder / "y.json").write_text(json.dumps([{"role": "user", "content": "in a json"}]),
                                   encoding="utf-8")
    result = run("import", str(folder))
    assert result.exit_code == 0, result.output
    said = result.output + (result.stderr if result.stderr_bytes is not None else "")
    assert "1 .json file(s) left out" in said and "refold import FILE" in said
