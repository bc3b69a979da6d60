"""Robustness: arbitrary JSON never makes validation or Anthropic conversion crash.

Any input either passes or raises a ``MessageValidationError`` (a one-line user error); never a
``TypeError``/``AttributeError`` that would surface as a traceback.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from refold.errors import MessageValidationError
from refold.messages import from_anthropic, repair, to_anthropic, validate_messages

KEYS = st.sampled_from(["role", "content", "type", "text", "tool_calls", "id", "function",
                        "name", "arguments", "tool_call_id", "image_url", "url", "source",
                        "input", "tool_use_id", "thinking", "signature", "data", "file",
                        "file_data", "input_audio", "format", "reasoning_content", "media_type",
                        "messages", "system", "title"])
VALUES = st.sampled_from(["user", "assistant", "tool", "system", "text", "image_url", "image",
                          "tool_use", "tool_result", "thinking", "function", "document", "file",
                          "data:image/png;base64,AAAA", "https://x/y.png", "base64", "url",
                          "{}", "", "c1"])
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | VALUES | st.text(max_size=3),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(KEYS, children,
                                                                       max_size=5),
    max_leaves=20)


def survives(fn: Any, value: Any) -> Any:
    try:
        return fn(value)
    except MessageValidationError:
        return None


@settings(max_examples=400, deadline=None)
@given(st.lists(JSON, max_size=4))
def test_validation_and_conversion_never_crash(items: list[Any]) -> None:
    valid = survives(validate_messages, items)
    if valid is not None:
        repaired = repair(valid).messages
        survives(to_anthropic, repaired)
    survives(from_anthropic, items)


BLOCK = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "image", "document", "tool_use", "tool_result",
                              "thinking", "redacted_thinking", "server_tool_use"])},
    optional={"text": JSON, "source": JSON, "content": JSON, "input": JSON, "id": JSON,
              "name": JSON, "tool_use_id": JSON, "thinking": JSON, "title": JSON})
TURN = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "system"]),
                              "content": st.lists(BLOCK, max_size=3) | JSON})


@settings(max_examples=400, deadline=None)
@given(st.lists(TURN, max_size=4), st.none() | JSON)
def test_from_anthropic_on_block_shaped_garbage(turns: list[Any], system: Any) -> None:
    try:
        messages = from_anthropic(turns, system=system)
    except MessageValidationError:
        return
    assert isinstance(messages, list)
    survives(validate_messages, messages)
