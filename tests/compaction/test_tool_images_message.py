"""The user message carrying tool results' images (Codex's ``view_image`` through
``/v1/responses``) is the tools' output, not a request: no goal, and never taken for the last
real user message the tail must keep (``boundaries.required_indices``)."""

from __future__ import annotations

import json
from typing import Any

from refold.compaction import compact
from refold.compaction.boundaries import required_indices
from refold.messages.model import TOOL_IMAGES_NOTE, is_tool_images

PNG = "data:image/png;base64,iVBORw0KGgo="
IMAGES = {"role": "user", "content": [{"type": "text", "text": TOOL_IMAGES_NOTE},
                                      {"type": "image_url", "image_url": {"url": PNG}}]}


def run() -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "agent"},
                                      {"role": "user", "content": "Fix the chart colours"}]
    for i in range(30):
        call = {"id": f"c{i}", "type": "function",
                "function": {"name": "view_image", "arguments": json.dumps({"path": f"{i}.png"})}}
        messages += [{"role": "assistant", "content": f"Looking at {i}.", "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": f"c{i}", "content": "[image]" + " x" * 200},
                     IMAGES]
    return messages


def test_the_images_message_is_no_request() -> None:
    messages = run()
    assert is_tool_images(IMAGES) and not is_tool_images(messages[1])
    assert 1 in required_indices(messages)  # the request, not the last images message
    result = compact(messages, context_length=6000)
    summary = result.report.summary
    assert result.report.summarized > 0
    assert "Fix the chart colours" in summary.split("##")[1]
    assert TOOL_IMAGES_NOTE not in summary
