"""A deterministic synthetic agent transcript (tool calls, errors, decisions) for tests."""

from __future__ import annotations

import json
from typing import Any


def agent_transcript(rounds: int = 30, *, output_lines: int = 200, chinese: bool = False
                     ) -> list[dict[str, Any]]:
    ask = ("修复 src/app/login.py 里的登录错误。请使用 pytest，不要使用 unittest。" if chinese
           else "Fix the login bug in src/app/login.py. Please use pytest, never use unittest.")
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."},
                                  {"role": "user", "content": ask}]
    for i in range(rounds):
        args = json.dumps({"command": f"pytest tests/test_login.py -k case{i}"})
        msgs.append({"role": "assistant",
                     "content": f"Running case {i}. I decided to use fixtures because they "
                                "are cleaner.",
                     "tool_calls": [{"id": f"call_{i}", "type": "function",
                                     "function": {"name": "terminal", "arguments": args}}]})
        body = f"collected case {i}\n" + "log line\n" * output_lines
        body += (f"KeyError: 'user{i}'\nexit code 1" if i % 3 == 0
                 else "1 passed in 0.5s\nexit code 0")
        msgs.append({"role": "tool", "tool_call_id": f"call_{i}", "content": body})
    msgs.append({"role": "assistant", "content": "I've fixed the bug. Next I'll add logging."})
    msgs.append({"role": "user", "content": "现在加上日志" if chinese else "Great, now add logging"})
    return msgs
