"""Hypothesis strategies for agent conversations (shared by the compaction property tests)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

WORDS = ["fix", "the", "login", "bug", "in", "src/app/login.py", "run", "pytest", "deploy",
         "v1.4.2", "https://example.com/docs", "350 ms", "PROJ-42", "never", "use", "prefer",
         "database", "schema", "error", "KeyError", "timeout", "config", "/etc/hosts", "2.5 GB"]
CJK = ["修复", "登录", "错误", "数据库", "配置", "测试", "部署", "文件", "请", "不要", "必须",
       "ログイン", "バグ", "修正", "してください"]


@st.composite
def text(draw: st.DrawFn, *, cjk: bool = False, big: bool = False) -> str:
    pool = CJK if cjk else WORDS
    n = draw(st.integers(1, 40))
    out = " ".join(draw(st.sampled_from(pool)) for _ in range(n))
    if big:
        out = (out + "\n") * draw(st.integers(20, 200))
    return out


@st.composite
def conversations(draw: st.DrawFn, *, strict: bool = False) -> list[dict[str, Any]]:
    """A valid OpenAI conversation; ``strict`` avoids consecutive same-role messages."""
    cjk = draw(st.booleans())
    msgs: list[dict[str, Any]] = []
    if draw(st.booleans()):
        msgs.append({"role": "system", "content": "You are an agent. " + draw(text())})
    call_no = 0
    for _turn in range(draw(st.integers(1, 10))):
        user: dict[str, Any] = {"role": "user", "content": draw(text(cjk=cjk))}
        if draw(st.integers(0, 9)) == 0:
            user["content"] = [{"type": "text", "text": draw(text())},
                               {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]
        if draw(st.integers(0, 7)) == 0:
            user["name"] = "alice"
        msgs.append(user)
        if not strict and draw(st.integers(0, 5)) == 0:
            msgs.append({"role": "user", "content": draw(text(cjk=cjk))})
        for _round in range(draw(st.integers(0, 3))):
            n_calls = draw(st.integers(1, 3))
            calls = []
            for _ in range(n_calls):
                call_no += 1
                args = json.dumps({"command": draw(text()), "path": f"src/mod{call_no}.py"})
                calls.append({"id": f"call_{call_no}", "type": "function",
                              "function": {"name": draw(st.sampled_from(["terminal", "read_file",
                                                                         "patch"])),
                                           "arguments": args}})
            content = None if draw(st.booleans()) else draw(text(cjk=cjk))
            msgs.append({"role": "assistant", "content": content, "tool_calls": calls})
            for call in calls:
                big = draw(st.integers(0, 3)) == 0
                out = draw(text(big=big)) + draw(st.sampled_from(["\nexit code 0",
                                                                  "\nexit code 1",
                                                                  "\nKeyError: 'x'", ""]))
                msgs.append({"role": "tool", "tool_call_id": call["id"], "content": out})
        tool_only = msgs[-1]["role"] == "tool" and draw(st.booleans())
        if not tool_only:
            reply: dict[str, Any] = {"role": "assistant", "content": draw(text(cjk=cjk))}
            if draw(st.integers(0, 5)) == 0:
                reply["reasoning_content"] = "<think>" + draw(text()) + "</think>"
            msgs.append(reply)
            if not strict and draw(st.integers(0, 5)) == 0:
                msgs.append({"role": "assistant", "content": draw(text(cjk=cjk))})
    return msgs
