"""``refold compact``, ``refold context`` and ``refold sessions compact`` end to end."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from refold.cli.main import cli, main
from refold.compaction.structure import provider_problems
from refold.store.sqlite import SQLiteStore
from refold.testing import serve

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "compaction"))
from agent_transcript import agent_transcript


def invoke(home: Path, *args: str, env: dict[str, str | None] | None = None) -> Result:
    base: dict[str, str | None] = {"REFOLD_UPSTREAM": None, "REFOLD_SUMMARIZER_URL": None,
                                   "REFOLD_SUMMARIZER": None}
    return CliRunner().invoke(cli, ["--home", str(home), *args], env={**base, **(env or {})},
                              catch_exceptions=False)


def ok_json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # stderr may carry log lines from other layers


@pytest.fixture
def transcript(tmp_path: Path) -> Path:
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"messages": agent_transcript(40)}), encoding="utf-8")
    return path


def test_compact_reads_stdin_and_a_pipe(tmp_path: Path, transcript: Path) -> None:
    """`refold compact -` was refused ("File '-' does not exist") and `refold compact <(…)`
    said "63: not valid JSON at line 1": the format sniffing had read the pipe first."""
    import os
    import subprocess

    args = ["--context-length", "12000", "--model", "gpt-4o", "--json"]
    expected = ok_json(invoke(tmp_path / "h", "compact", str(transcript), *args))
    result = CliRunner().invoke(cli, ["--home", str(tmp_path / "h"), "compact", "-", *args],
                                input=transcript.read_bytes())
    assert ok_json(result)["messages"] == expected["messages"]
    import threading

    read, write = os.pipe()  # what <(…) gives: /dev/fd/N

    def feed() -> None:
        with os.fdopen(write, "wb") as out:
            out.write(transcript.read_bytes())

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    try:
        piped = subprocess.run([sys.executable, "-m", "refold.cli.main", "--home",
                                str(tmp_path / "h"), "compact", f"/dev/fd/{read}", *args],
                               capture_output=True, timeout=120, pass_fds=(read,))
    finally:
        os.close(read)
        writer.join(5)
    assert piped.returncode == 0, piped.stderr.decode()
    assert json.loads(piped.stdout)["messages"] == expected["messages"]


def test_compact_file_json(tmp_path: Path, transcript: Path) -> None:
    data = ok_json(invoke(tmp_path / "h", "compact", str(transcript), "--context-length",
                          "12000", "--model", "gpt-4o", "--json"))
    report = data["report"]
    for key in ("tokens_before", "tokens_after", "summarizer", "anchors", "warnings"):
        assert key in report
    assert report["tokens_after"] < report["tokens_before"] and report["summarizer"] == "builtin"
    assert report["anchors"] and isinstance(report["warnings"], list)
    assert provider_problems(data["messages"], "openai") == []
    assert all(not k.startswith("_") for m in data["messages"] for k in m)


def test_compact_jsonl_and_human_output(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(m) for m in agent_transcript(40)), encoding="utf-8")
    result = invoke(tmp_path / "h", "compact", str(path), "--context-length", "12000")
    assert result.exit_code == 0 and result.output.startswith("ok: compacted")
    assert "CONTEXT SUMMARY — REFERENCE ONLY" in result.output


def test_compact_with_the_llm_summarizer(tmp_path: Path, transcript: Path) -> None:
    with serve(["## Goal\n- fix login\n## Progress\n### Done\n- the login form was read"]) as s:
        data = ok_json(invoke(tmp_path / "h", "compact", str(transcript), "--context-length",
                              "12000", "--summarizer", "llm", "--json",
                              env={"REFOLD_SUMMARIZER_URL": s.base_url,
                                   "REFOLD_SUMMARIZER_MODEL": "aux"}))
    assert data["report"]["summarizer"] == "llm:aux"


@pytest.mark.parametrize(("content", "needle"), [
    ("{not json", "error:"),
    ('[{"role": "wizard", "content": "x"}]', "role"),
])
def test_bad_input_is_one_clear_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     content: str, needle: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(SystemExit) as exit_info:
        main(["--home", str(tmp_path / "h"), "compact", str(path), "--context-length", "1000"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith("error:") and needle in err
    assert "Traceback" not in err


def test_llm_summarizer_without_endpoint_is_an_input_error(
        tmp_path: Path, transcript: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REFOLD_UPSTREAM", raising=False)
    monkeypatch.delenv("REFOLD_SUMMARIZER_URL", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        main(["--home", str(tmp_path / "h"), "compact", str(transcript), "--context-length",
              "12000", "--summarizer", "llm"])
    assert exit_info.value.code == 2 and "endpoint" in capsys.readouterr().err


def _stored_session(home: Path) -> str:
    home.mkdir(parents=True, exist_ok=True)
    store = SQLiteStore(str(home / "refold.db"))
    try:
        session = store.create_session(title="Login work", model="gpt-4o")
        store.append_messages(session.id, agent_transcript(40)[1:])
        store.append_event(session.id, "system_prompt", {"text": "You are a coding agent."})
        return session.id
    finally:
        store.close()


def test_sessions_compact_then_context(tmp_path: Path) -> None:
    home = tmp_path / "h"
    sid = _stored_session(home)
    before = ok_json(invoke(home, "context", sid[:8], "--context-length", "12000", "--json"))
    assert before["parts"]["summary"] == 0 and before["checkpoint_id"] is None
    assert before["parts"]["system"] > 0  # the runtime's recorded system prompt
    done = ok_json(invoke(home, "sessions", "compact", sid, "--context-length", "12000",
                          "--json"))
    assert done["stored"] and done["checkpoint_id"] and done["rotated_from"] is None
    after = ok_json(invoke(home, "context", sid, "--context-length", "12000", "--json"))
    assert after["parts"]["summary"] > 0 and after["total"] < before["total"]
    table = invoke(home, "context", sid, "--context-length", "12000")
    assert table.exit_code == 0 and "summary" in table.output and "tail:tool" in table.output
    # the heading on one line (as the table's title it was wrapped to the table's width)
    assert table.output.splitlines()[0] == (
        f"session {sid[:12]} — {after['total']:,} tokens, {after['percent_of_window']}% of "
        f"12,000 (compacts at {after['threshold']:,})")


def test_sessions_compact_rotate(tmp_path: Path) -> None:
    home = tmp_path / "h"
    sid = _stored_session(home)
    result = invoke(home, "sessions", "compact", sid, "--context-length", "12000", "--rotate")
    assert result.exit_code == 0 and "continues" in result.output
    store = SQLiteStore(str(home / "refold.db"))
    try:
        assert store.resolve_resume(sid).title == "Login work #2"
    finally:
        store.close()


def test_sessions_compact_rotate_then_a_proxy_client_continues_in_the_child(
        tmp_path: Path) -> None:
    from refold.runtime import Engine

    home = tmp_path / "h"
    sid = _stored_session(home)
    result = invoke(home, "sessions", "compact", sid, "--context-length", "12000", "--rotate")
    assert result.exit_code == 0, result.output
    history = [{"role": "system", "content": "You are a coding agent."},
               *agent_transcript(40)[1:], {"role": "user", "content": "and now the docs"}]
    store = SQLiteStore(str(home / "refold.db"))
    try:
        with Engine(store, model="gpt-4o", context_length=128_000) as engine:
            rt = engine.open_session("Login work")
            rt.prepare_history(history)
        child = store.resolve_resume(sid)
        rows = store.get_messages(child.id, include_inactive=True)
        assert rt.session_id == child.id and all(r.active for r in rows)
        assert rows[-1].message == history[-1]
        assert len(rows) < len(history) - 1  # the carried view + the new message, no re-sync
    finally:
        store.close()
