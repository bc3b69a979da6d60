"""``strip_cache_control``: the request without its ``cache_control`` markers and where they
were, leaving the client's body as it came (only what held a marker is copied)."""

from __future__ import annotations

import copy
import json
from typing import Any

from refold.server.anthropic_wire import strip_cache_control

MARK = {"type": "ephemeral"}


def body() -> dict[str, Any]:
    history: list[dict[str, Any]] = []
    for n in range(40):
        history.append({"role": "user", "content": [{"type": "text", "text": f"q{n}"}]})
        history.append({"role": "assistant", "content": f"a{n}"})
    history[-2]["content"][0]["cache_control"] = MARK  # Claude Code's way: the last turns
    history.append({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": "out"},
        {"type": "text", "text": "go on", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]})
    return {"model": "m", "max_tokens": 10, "messages": history, "system": [
        {"type": "text", "text": "You are Claude Code."},
        {"type": "text", "text": "Be terse.", "cache_control": MARK}], "tools": [{"name": "x"}]}


def test_the_markers_go_and_the_body_stays_as_sent() -> None:
    sent = body()
    before = copy.deepcopy(sent)
    clean, marks = strip_cache_control(sent)
    assert sent == before  # the client's body, markers and all
    assert "cache_control" not in json.dumps(clean)
    expected = copy.deepcopy(before)  # what a deep copy with the markers popped gives
    for block in expected["system"]:
        block.pop("cache_control", None)
    for turn in expected["messages"]:
        for block in turn["content"] if isinstance(turn["content"], list) else []:
            block.pop("cache_control", None)
    assert clean == expected
    assert marks.system == MARK
    assert marks.messages == [(3, 0, MARK), (1, 1, {"type": "ephemeral", "ttl": "1h"})]


def test_a_body_without_markers_is_not_copied() -> None:
    sent = body()
    sent["system"] = "plain"
    for turn in sent["messages"]:
        for block in turn["content"] if isinstance(turn["content"], list) else []:
            block.pop("cache_control", None)
    clean, marks = strip_cache_control(sent)
    assert clean == sent and clean is not sent
    assert clean["messages"] is sent["messages"]  # nothing to take out: shared, not copied
    assert marks.system is None and marks.messages == []
