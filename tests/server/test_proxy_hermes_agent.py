"""Hermes-Agent's own ``AIAgent`` pointed at ``refold serve``: a real agent's re-sent history.

Hermes strips the white space around a reply when it keeps it, so the history it re-sends
spells some replies differently from what the model streamed. Those are the stored replies:
the conversation stays one session, each message stored once. Hermes' modules import its
top-level ``tools`` package, which refold's ``tests/tools`` shadows inside pytest, so the agent
runs in a child process (as in ``tests/integrations/test_hermes_plugin.py``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from refold.store import Store
from refold.testing import ScriptedReply, serve

ProxyFactory = Callable[..., Any]

AGENT = """
import os, sys
from pathlib import Path
os.environ["HERMES_HOME"] = sys.argv[2]
from hermes_state import SessionDB
from run_agent import AIAgent
agent = AIAgent(base_url=sys.argv[1], api_key="sk-test", model="gpt-4o-mini", quiet_mode=True,
                session_db=SessionDB(db_path=Path(sys.argv[2]) / "state.db"),
                skip_context_files=True, skip_memory=True, enabled_toolsets=["terminal"],
                max_iterations=5)
history = None
for question in ["Why does the deploy fail? Check the port.", "and now?",
                 "check the port again", "thanks"]:
    history = agent.run_conversation(question, conversation_history=history)["messages"]
"""


def reply(body: dict[str, Any]) -> ScriptedReply:
    messages = body["messages"]
    last = messages[-1]
    text = last.get("content") if isinstance(last.get("content"), str) else ""
    if not body.get("tools"):  # Hermes' own side calls (a title)
        return ScriptedReply(content="Deploy port")
    if last["role"] == "tool":
        return ScriptedReply(content="Port 5433 is busy; use 5434.\n")  # a trailing newline
    if "port" in text:
        return ScriptedReply(content=None, tool_calls=[{
            "id": f"call_{len(messages)}", "type": "function",
            "function": {"name": "terminal", "arguments": '{"command": "echo 5433 busy"}'}}])
    return ScriptedReply(content=f"Done: {text} ")  # a trailing space


def test_hermes_agent_through_the_proxy_is_one_session_each_message_once(
        start_proxy: ProxyFactory, sqlite_store: Store, tmp_path: Path) -> None:
    with serve(default=reply) as up:
        proxy = start_proxy(up)
        hermes_home = tmp_path / ".hermes"
        hermes_home.mkdir()
        done = subprocess.run([sys.executable, "-c", AGENT, proxy.base_url, str(hermes_home)],
                              cwd=tmp_path, capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, done.stderr[-3000:]
    conversations = [s for s in sqlite_store.list_sessions()
                     if any(r.role == "tool" for r in sqlite_store.get_messages(s.id))]
    assert len(conversations) == 1, [s.title for s in sqlite_store.list_sessions()]
    rows = sqlite_store.get_messages(conversations[0].id, include_inactive=True)
    assert [(r.role, r.active) for r in rows] == [
        ("user", True), ("assistant", True), ("tool", True), ("assistant", True),
        ("user", True), ("assistant", True),
        ("user", True), ("assistant", True), ("tool", True), ("assistant", True),
        ("user", True), ("assistant", True)]
    assert rows[3].message["content"] == "Port 5433 is busy; use 5434.\n"  # as the model said it
    assert json.loads(rows[1].message["tool_calls"][0]["function"]["arguments"]) == {
        "command": "echo 5433 busy"}
