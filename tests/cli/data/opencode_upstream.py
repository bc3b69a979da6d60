"""The scripted upstream ``opencode.db`` was written against (see README.md beside it).

    python tests/cli/data/opencode_upstream.py PORT
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from refold.testing import ScriptedReply, serve

LONG = "The deploy pipeline reads its port from config/deploy.toml, " * 60


def call(name: str, args: dict[str, Any], call_id: str) -> ScriptedReply:
    return ScriptedReply(content=None, tool_calls=[{"id": call_id, "type": "function", "function": {
        "name": name, "arguments": json.dumps(args)}}])


def text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def reply(body: dict[str, Any]) -> ScriptedReply:
    messages = body.get("messages", [])
    last = messages[-1] if messages else {}
    said = text_of(last)
    if not body.get("tools"):  # OpenCode's title and compaction calls
        return ScriptedReply(content="Deploy port check")
    if last.get("role") == "tool":
        if "5433" in said:
            return ScriptedReply(content="Port 5433 is busy; use 5434.")
        if "5434 is free" in said:
            return ScriptedReply(content="The subagent says 5434 is free.")
        return ScriptedReply(content="The file is missing, so the config falls back to defaults.")
    if "check the port" in said:
        return call("bash", {"command": "echo port 5433 busy", "description": "check port"},
                    "call_port")
    if "read the config" in said:
        return call("read", {"filePath": "/tmp/oc/proj/missing.toml"}, "call_read")
    if "ask a subagent" in said:
        return call("task", {"description": "check 5434", "subagent_type": "general",
                             "prompt": "Is port 5434 free? Report briefly."}, "call_task")
    if "Is port 5434 free" in said:
        return ScriptedReply(content="Subagent report: 5434 is free.")
    if "long answer" in said:
        return ScriptedReply(content=LONG)
    return ScriptedReply(content="Done: " + said[:40])


if __name__ == "__main__":
    with serve(default=reply, port=int(sys.argv[1])) as upstream:
        print(upstream.base_url, flush=True)
        time.sleep(3600)
