"""Loading transcripts: JSON list, {"messages": [...]}, JSONL; errors name the line or index."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from refold.errors import InvalidInput, MessageValidationError
from refold.messages import load_messages, load_messages_file

MESSAGES = [{"role": "system", "content": "sys"}, {"role": "user", "content": "你好"},
            {"role": "assistant", "content": "hi"}]


@pytest.mark.parametrize("text", [
    json.dumps(MESSAGES),
    json.dumps(MESSAGES, indent=2, ensure_ascii=False),
    json.dumps({"model": "m", "messages": MESSAGES}, indent=2),
    "\n".join(json.dumps(m, ensure_ascii=False) for m in MESSAGES) + "\n",
    "\ufeff" + "\n\n".join(json.dumps(m) for m in MESSAGES),
])
def test_formats_load_the_same_messages(text: str, tmp_path: Path) -> None:
    assert load_messages(text) == MESSAGES
    assert load_messages(text.encode("utf-8")) == MESSAGES
    path = tmp_path / "t.jsonl"
    path.write_text(text, encoding="utf-8")
    assert load_messages_file(path) == MESSAGES


def test_single_message_object() -> None:
    assert load_messages('{"role": "user", "content": "x"}') == [{"role": "user", "content": "x"}]


def test_jsonl_malformed_line_is_named(tmp_path: Path) -> None:
    lines = [json.dumps(m) for m in MESSAGES] + ['{"role": "user", "content": "cut']
    path = tmp_path / "bad.jsonl"
    path.write_text("\n" + "\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(InvalidInput, match=r"bad.jsonl line 5: not valid JSON"):
        load_messages_file(path)
    with pytest.raises(InvalidInput, match=r"x line 4: not valid JSON"):
        load_messages("\n".join(lines), source_name="x")


def test_jsonl_invalid_message_names_line_and_field() -> None:
    text = "\n".join([json.dumps(MESSAGES[0]), json.dumps({"role": "tool", "content": "r"})])
    with pytest.raises(MessageValidationError) as info:
        load_messages(text, source_name="s.jsonl")
    assert str(info.value).startswith("s.jsonl line 2: field 'tool_call_id'")
    assert info.value.field == "tool_call_id"
    assert info.value.details["line"] == 2


def test_json_invalid_message_names_index() -> None:
    text = json.dumps([*MESSAGES, {"role": "user"}])
    with pytest.raises(MessageValidationError) as info:
        load_messages(text, source_name="a.json")
    assert str(info.value).startswith("a.json: message 3, field 'content'")
    assert info.value.index == 3


@pytest.mark.parametrize(("text", "words"), [
    ("", "no messages"),
    ("   \n", "no messages"),
    ("[1, 2", "not valid JSON at line 1"),
    ('{"messages": {"role": "user"}}', "'messages' must be a list"),
    ('"hello"', "expected a list of messages"),
    ("[3]", "message 0"),
])
def test_bad_documents(text: str, words: str) -> None:
    with pytest.raises(InvalidInput, match=words):
        load_messages(text)


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="no such file"):
        load_messages_file(tmp_path / "nope.jsonl")
    with pytest.raises(InvalidInput, match="is a directory"):
        load_messages_file(tmp_path)


def test_invalid_utf8_is_replaced(tmp_path: Path) -> None:
    raw = b'{"role": "user", "content": "caf\xe9"}\n'
    assert load_messages(raw) == [{"role": "user", "content": "caf\ufffd"}]
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(raw * 2)
    assert load_messages_file(path)[1]["content"] == "caf\ufffd"


ANTHROPIC_SAMPLE = Path(__file__).resolve().parents[2] / "src/refold/data/sample_anthropic.json"


def test_load_anthropic_document_list_and_jsonl(tmp_path: Path) -> None:
    from refold.messages import from_anthropic, load_anthropic, to_anthropic

    messages = load_messages_file(ANTHROPIC_SAMPLE, fmt="anthropic")
    assert messages[0]["role"] == "system"
    assert any(m["role"] == "tool" for m in messages)
    doc = json.loads(ANTHROPIC_SAMPLE.read_text(encoding="utf-8"))
    assert to_anthropic(messages) == doc
    turns = doc["messages"]
    assert load_anthropic(json.dumps(turns)) == from_anthropic(turns)
    jsonl = "\n".join(json.dumps(t, ensure_ascii=False) for t in turns)
    assert load_anthropic(jsonl.encode("utf-8")) == from_anthropic(turns)
    with pytest.raises(InvalidInput, match="x line 2: not valid JSON"):
        load_anthropic(json.dumps(turns[0]) + "\n{oops", source_name="x")
    with pytest.raises(MessageValidationError, match="Anthropic message 1, field 'role'"):
        load_anthropic(json.dumps([turns[0], {"role": "tool", "content": "x"}]))
    with pytest.raises(InvalidInput, match="unknown transcript format"):
        load_messages_file(ANTHROPIC_SAMPLE, fmt="gemini")


def test_openai_loader_hints_at_the_anthropic_format() -> None:
    with pytest.raises(MessageValidationError) as info:
        load_messages_file(ANTHROPIC_SAMPLE)
    assert "--format anthropic" in str(info.value)


@pytest.mark.parametrize("codec", ["utf-16", "utf-16-be", "utf-32"])
@pytest.mark.parametrize("jsonl", [False, True], ids=["json", "jsonl"])
def test_a_file_with_a_utf16_or_utf32_mark_is_read_in_that_encoding(
        tmp_path: Path, codec: str, jsonl: bool) -> None:
    """PowerShell's ``>`` writes UTF-16 with a byte-order mark: read as UTF-8, such a file was
    "invalid UTF-8 ... not valid JSON"."""
    messages = [{"role": "user", "content": "部署 ok"}, {"role": "assistant", "content": "fine"}]
    text = ("\n".join(json.dumps(m, ensure_ascii=False) for m in messages) if jsonl
            else json.dumps(messages, ensure_ascii=False))
    data = text.encode(codec)
    if codec.endswith("-be"):
        data = b"\xfe\xff" + data  # the explicit-endian codecs write no mark
    path = tmp_path / ("t.jsonl" if jsonl else "t.json")
    path.write_bytes(data)
    assert load_messages_file(path) == messages
