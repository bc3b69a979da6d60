"""``refold context`` of a proxied session counts the tool definitions its requests carry.

A proxied session stores its messages, not the request's tools: ``refold context`` of a Claude
Code session showed "tools 0" and 15% of a 30,000-token window for requests of 21-23k tokens
(its 24 tools alone ~16k). The runtime records their size as a ``tools`` event when they
change; a branch or fork carries it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
from click.testing import CliRunner

from refold.compaction.session import fork_with_state
from refold.store import Store
from refold.testing import serve

TOOLS = [{"type": "function", "function": {
    "name": f"tool_{n}", "description": "Runs a step of the build and reports its output in "
    "full, with the exit status and the files it touched. " * 6,
    "parameters": {"type": "object", "properties": {
        "path": {"type": "string", "description": "The file or folder to act on."},
        "mode": {"type": "string", "enum": ["fast", "full", "dry-run"]}}}}} for n in range(8)]


def test_refold_context_of_a_proxied_session_counts_its_tools(
        start_proxy: Any, sqlite_store: Store, tmp_path: Path) -> None:
    from refold.cli.main import cli

    with serve(["one", "two"]) as up:
        client = openai.OpenAI(base_url=start_proxy(up).base_url, api_key="x", max_retries=0)
        history: list[dict[str, Any]] = [{"role": "user", "content": "build the docs"}]
        for turn in range(2):
            reply = client.chat.completions.create(
                model="m", messages=history, tools=TOOLS)  # type: ignore[arg-type]
            history += [{"role": "assistant", "content": reply.choices[0].message.content},
                        {"role": "user", "content": f"and the tests, part {turn}"}]
    [session] = sqlite_store.list_sessions()
    assert len(sqlite_store.list_events(session.id, "tools")) == 1  # once, not every turn
    shown = CliRunner().invoke(cli, ["--db", str(tmp_path / "refold.db"), "context",
                                     session.id, "--json"])
    assert shown.exit_code == 0, shown.output
    parts = json.loads(shown.output)["parts"]
    assert parts["tools"] > 500, parts  # eight definitions of ~100 tokens each
    branch = fork_with_state(sqlite_store, session.id, kind="branch")
    assert sqlite_store.list_events(branch.id, "tools")  # a branch carries it


def test_refold_context_of_a_proxied_session_measures_against_its_window(
        start_proxy: Any, sqlite_store: Store, tmp_path: Path) -> None:
    """Served with ``--context-length 30000``, it read "16.4% of 128,000 (compacts at
    96,000)": the settings' window, not the session's (Claude Code, Codex and OpenCode runs)."""
    from refold.cli.main import cli

    with serve(["one", "two"]) as up:
        client = openai.OpenAI(base_url=start_proxy(up, context_length=30_000).base_url,
                               api_key="x", max_retries=0)
        history: list[dict[str, Any]] = [{"role": "user", "content": "build the docs"}]
        for turn in range(2):
            reply = client.chat.completions.create(
                model="m", messages=history)  # type: ignore[arg-type]
            history += [{"role": "assistant", "content": reply.choices[0].message.content},
                        {"role": "user", "content": f"and the tests, part {turn}"}]
    [session] = sqlite_store.list_sessions()
    assert len(sqlite_store.list_events(session.id, "window")) == 1  # once, not every turn
    db = str(tmp_path / "refold.db")
    shown = CliRunner().invoke(cli, ["--db", db, "context", session.id, "--json"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output)["context_length"] == 30_000
    asked = CliRunner().invoke(cli, ["--db", db, "context", session.id, "--json",
                                     "--context-length", "64000"])
    assert json.loads(asked.output)["context_length"] == 64_000  # the flag still decides
    branch = fork_with_state(sqlite_store, session.id, kind="branch")
    assert sqlite_store.list_events(branch.id, "window")  # a branch carries it
