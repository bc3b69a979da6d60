"""``refold compact FILE`` reads what ``refold import`` reads: ``--format`` (openai, anthropic,
claude-code, codex, gemini), an agent's transcript recognised without it, and a hint that names
only options the command has."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from main_exit import run_main as _main


def _cc(kind: str, uuid: str, message: dict[str, Any]) -> dict[str, Any]:
    """A Claude Code transcript record (the shapes of tests/messages/test_agent_logs.py)."""
    return {"parentUuid": None, "isSidechain": False, "userType": "external", "cwd": "/p",
            "sessionId": "s-1", "version": "2.1.38", "type": kind, "message": message,
            "uuid": uuid, "timestamp": "2026-02-11T20:36:45.693Z"}


CLAUDE_CODE = [
    {"type": "file-history-snapshot", "messageId": "m0", "snapshot": {}, "isSnapshotUpdate": False},
    _cc("user", "u1", {"role": "user", "content": "The invoice totals test fails on 3.12"}),
    _cc("assistant", "a1", {"id": "msg_A", "type": "message", "role": "assistant",
                            "model": "claude-opus-4", "content": [
                                {"type": "text", "text": "Committed as 4f2a9c1."}]}),
]
ANTHROPIC = {"system": "Be brief.", "messages": [
    {"role": "user", "content": "List the files."},
    {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}}]},
    {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.txt"}]},
    {"role": "assistant", "content": "One file: a.txt."}]}


@pytest.fixture
def compact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
            capsys: pytest.CaptureFixture[str]) -> Any:
    for name in ("REFOLD_HOME", "REFOLD_DB", "REFOLD_SUMMARIZER", "REFOLD_SUMMARIZER_URL"):
        monkeypatch.delenv(name, raising=False)

    def run(path: Path, *args: str) -> tuple[int, str, str]:
        return _main(capsys, "--home", str(tmp_path / "home"), "compact", str(path),
                     "--context-length", "4000", "--summarizer", "builtin", "--json", *args)
    return run


def _write_jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_compact_reads_a_claude_code_transcript(tmp_path: Path, compact: Any) -> None:
    path = _write_jsonl(tmp_path / "cc.jsonl", CLAUDE_CODE)
    for args in ((), ("--format", "claude-code")):
        code, out, err = compact(path, *args)
        assert code == 0, err
        messages = json.loads(out)["messages"]
        assert messages[0] == {"role": "user", "content": "The invoice totals test fails on 3.12"}
        assert messages[-1]["content"] == "Committed as 4f2a9c1."


def test_compact_reads_an_anthropic_transcript_with_format(tmp_path: Path, compact: Any) -> None:
    path = tmp_path / "anthropic.json"
    path.write_text(json.dumps(ANTHROPIC), encoding="utf-8")
    code, out, err = compact(path)
    assert code == 2 and "--format anthropic" in err
    code, out, err = compact(path, "--format", "anthropic")
    assert code == 0, err
    messages = json.loads(out)["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert messages[2]["tool_calls"][0]["function"]["name"] == "Bash"
    assert messages[-1] == {"role": "assistant", "content": "One file: a.txt."}


def test_the_hint_names_an_option_compact_has(tmp_path: Path, compact: Any) -> None:
    """Read as OpenAI messages, a Claude Code transcript fails with a hint; what it suggests
    works on the same command."""
    path = _write_jsonl(tmp_path / "cc.jsonl", CLAUDE_CODE[1:])
    code, _, err = compact(path, "--format", "openai")
    assert code == 2 and "--format claude-code" in err and "import the file" not in err
    code, out, err = compact(path, "--format", "claude-code")
    assert code == 0, err
    assert json.loads(out)["messages"][-1]["content"] == "Committed as 4f2a9c1."
