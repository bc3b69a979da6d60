"""The system prompt a client sends (``refold serve``, ``prepare(system_prompt=…)``) is
recorded as a ``system_prompt`` event, not a row, and no export format held it. Now JSONL
starts with it as a system message (when the rows hold none), Markdown shows it, JSON lists it
in ``system_prompts``; importing such an export back stores nothing twice (the prompt is not
made a row of the session that recorded it), and into another archive the export of the
import is the export imported. A file's own system message is still a row (``#1 system``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from refold.cli.main import cli
from refold.errors import InvalidInput
from refold.runtime import Engine
from refold.store import Store

PROMPT = "You are a careful coding agent.\n\n<ROLE>fix what is asked, nothing else</ROLE>"


def _db_url(store: Store) -> str:
    schema = getattr(store, "schema", None)
    if schema is None or "schema=" in store.url:
        return store.url
    return f"{store.url}{'&' if '?' in store.url else '?'}schema={schema}"


def _cli(home: Path, db: str | None, *args: str) -> str:
    where = ["--home", str(home), *(["--db", db] if db else [])]
    result = CliRunner().invoke(cli, [*where, *args])
    assert result.exit_code == 0, (result.output, result.exception)
    return result.stdout


@pytest.fixture
def recorded(store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A session the runtime recorded as the proxy does: the client's system prompt with
    every request, two turns."""
    for name in ("REFOLD_HOME", "REFOLD_DB"):
        monkeypatch.delenv(name, raising=False)
    engine = Engine(store, model="gpt-4o-mini", context_length=32_000,
                    memory_dir=tmp_path / "memories")
    try:
        rt = engine.open_session(new=True, title="served")
        for turn in range(2):
            rt.prepare([{"role": "user", "content": f"question {turn}"}], system_prompt=PROMPT)
            rt.record({"role": "assistant", "content": f"answer {turn}"})
        return rt.session_id
    finally:
        engine.close()


def _exports(home: Path, db: str | None, session_id: str) -> dict[str, str]:
    return {fmt: _cli(home, db, "sessions", "export", session_id, "--format", fmt)
            for fmt in ("jsonl", "json", "md")}


def _lines(jsonl: str) -> list[Any]:
    return [json.loads(line) for line in jsonl.splitlines()]


def _comparable(json_export: str) -> list[Any]:
    """What a JSON export says of each session that its import elsewhere keeps: id, title,
    rows, recorded prompts (not the times an import gives anew, the source label it sets,
    or token counts it does not carry)."""
    return [(s["id"], s["title"],
             [(m["seq"], m["active"], m["identity"], m["message"]) for m in s["messages"]],
             [p["text"] for p in s.get("system_prompts", [])])
            for s in json.loads(json_export)["sessions"]]


def test_every_format_holds_the_recorded_prompt(store: Store, recorded: str,
                                                tmp_path: Path) -> None:
    assert [r.role for r in store.get_messages(recorded)] == ["user", "assistant"] * 2
    out = _exports(tmp_path / "home", _db_url(store), recorded)
    lines = [json.loads(line) for line in out["jsonl"].splitlines()]
    assert lines[0] == {"role": "system", "content": PROMPT}
    assert [m["content"] for m in lines[1:]] == ["question 0", "answer 0", "question 1",
                                                 "answer 1"]
    assert f"## system prompt\n\n{PROMPT}\n" in out["md"]
    assert out["md"].index("## system prompt") < out["md"].index("## 1 · user")
    session = json.loads(out["json"])["sessions"][0]
    assert [p["text"] for p in session["system_prompts"]] == [PROMPT]
    assert [m["message"]["role"] for m in session["messages"]] == ["user", "assistant"] * 2


def test_importing_the_export_back_stores_nothing_twice(store: Store, recorded: str,
                                                        tmp_path: Path) -> None:
    home, db = tmp_path / "home", _db_url(store)
    out = _exports(home, db, recorded)
    for fmt, extra in (("jsonl", ()), ("json", ()), ("jsonl", ("--session", recorded[:8]))):
        path = tmp_path / f"export.{fmt}"
        path.write_text(out[fmt], encoding="utf-8")
        report = json.loads(_cli(home, db, "import", str(path), *extra, "--json"))
        assert (report["session_id"], report["appended"], report["rewound"]) == \
            (recorded, 0, 0), (fmt, report)
    assert [s.id for s in store.list_sessions()] == [recorded]
    assert [r.role for r in store.get_messages(recorded, include_inactive=True)] == \
        ["user", "assistant"] * 2
    assert [e.payload["text"] for e in store.list_events(recorded, "system_prompt")] == [PROMPT]
    assert _exports(home, db, recorded) == out


@pytest.mark.parametrize("fmt", ["json", "jsonl"])
def test_the_export_of_its_import_elsewhere_is_the_export(store: Store, recorded: str,
                                                          tmp_path: Path, fmt: str) -> None:
    out = _exports(tmp_path / "home", _db_url(store), recorded)
    path = tmp_path / f"export.{fmt}"
    path.write_text(out[fmt], encoding="utf-8")
    other = tmp_path / "other"
    report = json.loads(_cli(other, None, "import", str(path), "--json"))
    again = _exports(other, None, report["session_id"])
    # line for line (keys come out in the order each backend keeps them: compared parsed)
    assert _lines(again["jsonl"]) == _lines(out["jsonl"])
    if fmt == "json":  # the session as it was there: rows, prompt, id, title
        assert report["session_id"] == recorded
        assert _comparable(again["json"]) == _comparable(out["json"])
        assert again["md"] == out["md"]
    again_report = json.loads(_cli(other, None, "import", str(path), "--json"))
    assert (again_report["session_id"], again_report["appended"]) == (report["session_id"], 0)


def test_a_files_own_system_message_stays_a_row(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("REFOLD_HOME", "REFOLD_DB"):
        monkeypatch.delenv(name, raising=False)
    messages = [{"content": "be brief", "role": "system"}, {"content": "hi", "role": "user"}]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(m) + "\n" for m in messages), encoding="utf-8")
    home = tmp_path / "home"
    session_id = json.loads(_cli(home, None, "import", str(path), "--json"))["session_id"]
    out = _exports(home, None, session_id)
    assert out["jsonl"] == path.read_text(encoding="utf-8")
    assert "## 1 · system" in out["md"] and "## system prompt" not in out["md"]
    assert "system_prompts" not in json.loads(out["json"])["sessions"][0]


@pytest.mark.parametrize("value", [5, "a prompt", {"text": "x"}])
def test_a_malformed_system_prompts_field_is_a_clear_error(
        store: Store, recorded: str, tmp_path: Path, value: Any) -> None:
    """A hand-edited export whose ``system_prompts`` is not a list was a traceback (an int
    is not iterable) or was read character by character."""
    home = tmp_path / "home"
    export = json.loads(_cli(home, _db_url(store), "sessions", "export", recorded,
                             "--format", "json"))
    export["sessions"][0]["system_prompts"] = value
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(export), encoding="utf-8")
    result = CliRunner().invoke(cli, ["--home", str(tmp_path / "other"), "import", str(path)])
    assert isinstance(result.exception, InvalidInput), result.exception  # exit status 2
    assert "'system_prompts': expected a list" in str(result.exception)
