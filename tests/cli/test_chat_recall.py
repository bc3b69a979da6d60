"""Past-session recall in ``refold chat`` (``REFOLD_RECALL_ENABLED``), against the scripted
model server: the block reaches the model with the user's line, the ledger keeps the line."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from refold.cli.main import cli
from refold.runtime.recall import ARCHIVE_NOTE, RECALL_OPEN
from refold.store.sqlite import SQLiteStore
from refold.testing import serve

QUESTION = "What port does the staging database use?"


def seed(home: Path) -> str:
    home.mkdir(parents=True, exist_ok=True)
    store = SQLiteStore(str(home / "refold.db"))
    try:
        old = store.create_session(title="db work")
        store.append_messages(old.id, [
            {"role": "user", "content": "which port does the staging database listen on?"},
            {"role": "assistant", "content": "The staging database listens on port 6543."}])
        return old.id
    finally:
        store.close()


def run_chat(home: Path, url: str, env: dict[str, str | None]) -> None:
    result = CliRunner().invoke(
        cli, ["--home", str(home), "chat", "--upstream", url, "--no-tools", "--title", "today"],
        input=f"{QUESTION}\n/quit\n", env={"REFOLD_UPSTREAM": None, **env},
        catch_exceptions=False)
    assert result.exit_code == 0, result.output


def test_chat_recalls_a_past_session_when_enabled(tmp_path: Path) -> None:
    past = seed(tmp_path)
    with serve(["Port 6543."]) as up:
        run_chat(tmp_path, up.base_url, {"REFOLD_RECALL_ENABLED": "true"})
        (body,) = up.llm.requests
    system = body["messages"][0]
    assert system["role"] == "system" and RECALL_OPEN not in system["content"]
    sent = body["messages"][-1]["content"]
    assert sent.startswith(QUESTION) and ARCHIVE_NOTE in sent and "port 6543" in sent
    store = SQLiteStore(str(tmp_path / "refold.db"))
    try:
        today = next(s for s in store.list_sessions() if s.id != past)
        rows = [r.message for r in store.get_messages(today.id)]
    finally:
        store.close()
    assert {"role": "user", "content": QUESTION} in rows
    assert not any(RECALL_OPEN in str(m.get("content")) for m in rows)


def test_chat_sends_the_line_alone_by_default(tmp_path: Path) -> None:
    seed(tmp_path)
    with serve(["Port 6543."]) as up:
        run_chat(tmp_path, up.base_url, {"REFOLD_RECALL_ENABLED": None})
        (body,) = up.llm.requests
    assert body["messages"][-1] == {"role": "user", "content": QUESTION}
