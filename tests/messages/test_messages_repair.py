"""repair(): tool pairing, orphans, duplicates, synthetic results, strict alternation."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from refold.messages import MISSING_RESULT, repair, validate_messages


def call(cid: str) -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": "f", "arguments": "{}"}}


def asst(*ids: str, content: str | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if ids:
        message["tool_calls"] = [call(i) for i in ids]
    return message


def tool(cid: str, content: str = "r") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": cid, "content": content}


def user(text: str = "u") -> dict[str, Any]:
    return {"role": "user", "content": text}


def test_valid_transcript_is_unchanged() -> None:
    messages = [user(), asst("a", "b"), tool("a"), tool("b"), asst(content="done")]
    result = repair(messages)
    assert result.messages == messages
    assert not result.changed


def test_results_moved_after_their_call_in_call_order() -> None:
    messages = [user(), asst("a", "b"), tool("b", "B"), user("x"), tool("a", "A")]
    result = repair(messages)
    assert result.messages == [user(), asst("a", "b"), tool("a", "A"), tool("b", "B"), user("x")]
    assert {c.kind for c in result.changes} == {"moved"}
    assert {c.index for c in result.changes} == {2, 4}


def test_orphan_removed_and_missing_inserted() -> None:
    messages = [tool("ghost"), user(), asst("a", "b"), tool("b")]
    result = repair(messages)
    assert result.messages == [user(), asst("a", "b"),
                               {"role": "tool", "tool_call_id": "a", "content": MISSING_RESULT},
                               tool("b")]
    kinds = [(c.kind, c.index) for c in result.changes]
    assert ("orphan_removed", 0) in kinds
    assert ("missing_inserted", 2) in kinds
    assert "ghost" in str(result.changes[0])


def test_duplicate_results_collapse_to_the_first() -> None:
    messages = [user(), asst("a"), tool("a", "first"), tool("a", "second")]
    result = repair(messages)
    assert result.messages == [user(), asst("a"), tool("a", "first")]
    assert [c.kind for c in result.changes] == ["duplicate_removed"]


def test_reused_call_id_matches_results_in_order() -> None:
    messages = [user(), asst("a"), tool("a", "1"), user(), asst("a"), tool("a", "2")]
    assert not repair(messages).changed


def test_empty_tool_calls_removed() -> None:
    result = repair([user(), {"role": "assistant", "content": "x", "tool_calls": []}])
    assert result.messages[1] == {"role": "assistant", "content": "x"}
    assert result.changes[0].kind == "empty_tool_calls_removed"


def test_strict_alternation_merges_same_roles_only_when_asked() -> None:
    image = {"type": "image_url", "image_url": {"url": "https://x/a.png"}}
    messages = [{"role": "system", "content": "s"}, user("a"), user("b"),
                {"role": "user", "content": [image]}, asst(content="x"), asst("c"), tool("c"),
                user("after tool")]
    assert not repair(messages).changed
    result = repair(messages, strict_alternation=True)
    assert result.messages[1] == {"role": "user", "content": [
        {"type": "text", "text": "a\n\nb"}, image]}
    assert result.messages[2] == {"role": "assistant", "content": "x",
                                  "tool_calls": [call("c")]}
    assert result.messages[3:] == [tool("c"), user("after tool")]
    assert [c.kind for c in result.changes] == ["merged"] * 3


def test_input_is_not_mutated() -> None:
    messages = [user(), {"role": "assistant", "content": "x", "tool_calls": []}, tool("z")]
    snapshot = [dict(m) for m in messages]
    repair(messages, strict_alternation=True)
    assert messages == snapshot


# -- properties ---------------------------------------------------------------------------------

IDS = st.sampled_from(["a", "b", "c", "d"])
MESSAGE = st.one_of(
    st.builds(user, st.sampled_from(["u", "v"])),
    st.builds(lambda ids: asst(*dict.fromkeys(ids), content="t"), st.lists(IDS, max_size=3)),
    st.builds(tool, IDS, st.sampled_from(["r1", "r2"])),
)


def check_pairing(messages: list[dict[str, Any]]) -> None:
    i = 0
    while i < len(messages):
        message = messages[i]
        assert message["role"] != "tool", f"tool result without its call at {i}"
        ids = [c["id"] for c in message.get("tool_calls") or []]
        following = messages[i + 1:i + 1 + len(ids)]
        assert [m.get("tool_call_id") for m in following] == ids
        i += 1 + len(ids)


@settings(max_examples=300, deadline=None)
@given(st.lists(MESSAGE, max_size=12), st.booleans())
def test_repair_properties(messages: list[dict[str, Any]], strict: bool) -> None:
    result = repair(messages, strict_alternation=strict)
    check_pairing(result.messages)
    validate_messages(result.messages)
    assert repair(messages, strict_alternation=strict) == result  # deterministic
    assert not repair(result.messages, strict_alternation=strict).changed  # idempotent
    if strict:
        for prev, nxt in zip(result.messages, result.messages[1:], strict=False):
            assert not (prev["role"] == nxt["role"] and prev["role"] in ("user", "assistant"))
    else:  # without merging, every non-tool message survives, in order, untouched
        assert [m for m in result.messages if m["role"] != "tool"] == \
            [m for m in messages if m["role"] != "tool"]
    if not result.changed:
        assert result.messages == messages
