"""Validation: each problem names the message index and the field, and good input passes."""

from __future__ import annotations

from typing import Any

import pytest

from refold.errors import InvalidInput, MessageValidationError
from refold.messages import invalid_tool_arguments, repair_text, validate_messages

CALL = {"id": "call_1", "type": "function",
        "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}


def good() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "be brief"},
        {"role": "developer", "content": [{"type": "text", "text": "rules"}]},
        {"role": "user", "content": [
            {"type": "text", "text": "看这张图"},
            {"type": "image_url", "image_url": {"url": "https://x.test/a.png", "detail": "low"}},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0K"}},
            {"type": "input_audio", "input_audio": {"data": "UklGR", "format": "wav"}},
            {"type": "file", "file": {"file_id": "file-1"}},
        ]},
        {"role": "assistant", "content": None, "tool_calls": [CALL],
         "reasoning_content": "need the file"},
        {"role": "tool", "tool_call_id": "call_1", "name": "read_file", "content": "print(1)"},
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]},
        {"role": "user", "content": "", "x_vendor_field": 1, "_meta": {"k": 1}},
    ]


def test_valid_transcript_passes_unchanged() -> None:
    messages = good()
    assert validate_messages(messages) == messages


@pytest.mark.parametrize(("index", "patch", "field", "words"), [
    (0, {"role": "bot"}, "role", "unknown role"),
    (0, {"role": "function"}, "role", "unknown role"),
    (2, {"content": None}, "content", "needs content"),
    (2, {"content": 5}, "content", "string or a list"),
    (2, {"content": [{"type": "video", "video": "x"}]}, "content[0].type", "not allowed"),
    (2, {"content": [{"type": "image_url", "image_url": {"url": "ftp://x"}}]},
     "content[0].image_url.url", "http(s) URL or a data: URI"),
    (2, {"content": [{"type": "image_url", "image_url": {"url": "data:image/png,abc"}}]},
     "content[0].image_url.url", "data URI"),
    (2, {"content": [{"type": "text", "text": 3}]}, "content[0].text", "string"),
    (2, {"content": ["hello"]}, "content[0]", "must be an object"),
    (2, {"content": [{"type": "file", "file": {}}]}, "content[0].file", "file_id"),
    (0, {"content": [{"type": "image_url", "image_url": {"url": "https://x/a.png"}}]},
     "content[0].type", "not allowed in system messages"),
    (3, {"tool_calls": None, "reasoning_content": None}, "content", "needs content, tool_calls or reasoning"),
    (3, {"tool_calls": "x"}, "tool_calls", "must be a list"),
    (3, {"tool_calls": [{**CALL, "id": ""}]}, "tool_calls[0].id", "non-empty"),
    (3, {"tool_calls": [CALL, CALL]}, "tool_calls[1].id", "duplicate"),
    (3, {"tool_calls": [{**CALL, "type": "custom"}]}, "tool_calls[0].type", "function"),
    (3, {"tool_calls": [{"id": "c", "type": "function"}]}, "tool_calls[0].function", "object"),
    (3, {"tool_calls": [{**CALL, "function": {"name": "f", "arguments": {"a": 1}}}]},
     "tool_calls[0].function.arguments", "JSON string"),
    (3, {"tool_calls": [{**CALL, "function": {"name": "", "arguments": "{}"}}]},
     "tool_calls[0].function.name", "non-empty"),
    (2, {"tool_calls": [CALL]}, "tool_calls", "only assistant"),
    (4, {"tool_call_id": None}, "tool_call_id", "needs a non-empty"),
    (2, {"tool_call_id": "x"}, "tool_call_id", "only tool messages"),
    (4, {"name": 7}, "name", "must be a string"),
    (3, {"reasoning_content": ["x"]}, "reasoning_content", "must be a string"),
])
def test_errors_name_index_and_field(index: int, patch: dict[str, Any], field: str,
                                     words: str) -> None:
    messages = good()
    messages[index] = {**messages[index], **patch}
    with pytest.raises(MessageValidationError) as info:
        validate_messages(messages)
    assert info.value.index == index
    assert info.value.field == field
    assert words in str(info.value)
    assert str(info.value).startswith(f"message {index}, field '{field}'")
    assert isinstance(info.value, InvalidInput)


def test_non_object_message_and_non_list() -> None:
    with pytest.raises(MessageValidationError, match=r"message 1.*JSON object"):
        validate_messages([{"role": "user", "content": "a"}, "hello"])
    with pytest.raises(MessageValidationError, match="list of messages"):
        validate_messages({"role": "user"})  # type: ignore[arg-type]


def test_invalid_json_arguments_are_accepted_and_listed() -> None:
    call = {**CALL, "function": {"name": "f", "arguments": '{"path": "a.p'}}
    messages = [{"role": "user", "content": "go"},
                {"role": "assistant", "content": None, "tool_calls": [CALL, call | {"id": "c2"}]}]
    assert validate_messages(messages) == messages
    assert invalid_tool_arguments(messages) == [(1, "c2")]


def test_lone_surrogates_are_replaced_not_stored() -> None:
    messages = [{"role": "user", "content": [{"type": "text", "text": "a\ud800b"}]},
                {"role": "assistant", "content": "ok \ud83d\ude00"}]
    out = validate_messages(messages)
    assert out[0]["content"][0]["text"] == "a\ufffdb"
    assert out[1]["content"] == "ok 😀"  # a valid pair written as two code points is joined
    assert messages[0]["content"][0]["text"] == "a\ud800b"  # input untouched
    for message in out:
        str(message["content"]).encode("utf-8")
    assert repair_text("plain") == "plain"


def test_clean_messages_come_back_as_they_are_and_only_dirty_ones_are_copied() -> None:
    clean = {"role": "assistant", "content": "naïve café", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "t", "arguments": "{}"}}]}
    dirty = {"role": "user", "content": "ok", "name": "x\udc00"}
    out = validate_messages([clean, dirty])
    assert out[0] is clean  # nothing to repair: no copy
    assert out[1] is not dirty and out[1]["name"] == "x\ufffd" and dirty["name"] == "x\udc00"


@pytest.mark.parametrize("value", [
    "plain", "naïve", "a\ud800", ["x", ["y", {"k": "\udc00"}]], {"k\ud800": "v"},
    {"a": [1, None, {"b": ("t\ud800",)}]}, {"a": [{"b": [[["deep \ud83d\ude00"]]]}]},
    [], {}, 3.5, None,
])
def test_the_repair_check_agrees_with_the_repair(value: Any) -> None:
    from refold.messages.validate import _needs_repair, _repair_value
    assert _needs_repair(value) == (_repair_value(value) is not value)


def test_an_object_without_a_role_is_named_so_not_unknown_role_none() -> None:
    """``{"foo": 1}`` (a settings file imported by mistake) said "unknown role None"."""
    with pytest.raises(MessageValidationError) as raised:
        validate_messages([{"foo": 1, "bar": 2}])
    assert "no role" in str(raised.value) and "'foo', 'bar'" in str(raised.value)
    assert "None" not in str(raised.value)
