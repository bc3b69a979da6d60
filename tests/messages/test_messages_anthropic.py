"""Anthropic Messages conversion: shapes, grouping, alternation and round trips."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refold.errors import MessageValidationError
from refold.messages import from_anthropic, repair, to_anthropic


def call(cid: str, args: dict[str, Any] | str) -> dict[str, Any]:
    arguments = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
    return {"id": cid, "type": "function", "function": {"name": "grep", "arguments": arguments}}


TRANSCRIPT: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": [
        {"type": "text", "text": "修复这个错误"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        {"type": "image_url", "image_url": {"url": "https://example.test/shot.png"}},
    ]},
    {"role": "assistant", "content": "Searching.", "reasoning_content": "look for the error",
     "tool_calls": [call("t1", {"pattern": "KeyError"}), call("t2", '{"pattern": "trunc')]},
    {"role": "tool", "tool_call_id": "t1", "content": "app.py:12: KeyError"},
    {"role": "tool", "tool_call_id": "t2", "content": "no match"},
    {"role": "user", "content": "also check tests"},
    {"role": "assistant", "content": None, "tool_calls": [call("t3", {})]},
    {"role": "tool", "tool_call_id": "t3", "content": ""},
    {"role": "assistant", "content": "Fixed: 已修复。"},
]


def test_shape_of_converted_request() -> None:
    out = to_anthropic(TRANSCRIPT)
    assert out["system"] == "You are a coding agent."
    turns = out["messages"]
    assert [t["role"] for t in turns] == ["user", "assistant", "user", "assistant", "user",
                                          "assistant"]
    assert turns[0]["content"][1] == {"type": "image", "source": {
        "type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    assert turns[0]["content"][2]["source"] == {"type": "url",
                                                "url": "https://example.test/shot.png"}
    assert [b["type"] for b in turns[1]["content"]] == ["thinking", "text", "tool_use",
                                                        "tool_use"]
    assert turns[1]["content"][2]["input"] == {"pattern": "KeyError"}
    assert turns[1]["content"][3]["input"] == {"_raw_arguments": '{"pattern": "trunc'}
    # both results and the following user text share one user turn, results first
    assert [b["type"] for b in turns[2]["content"]] == ["tool_result", "tool_result", "text"]
    assert turns[2]["content"][0] == {"type": "tool_result", "tool_use_id": "t1",
                                      "content": "app.py:12: KeyError"}
    assert turns[5] == {"role": "assistant", "content": "Fixed: 已修复。"}


def test_round_trip_of_repaired_transcript() -> None:
    out = to_anthropic(TRANSCRIPT)
    assert from_anthropic(out["messages"], system=out.get("system")) == TRANSCRIPT


def test_conversion_repairs_and_alternates() -> None:
    messages = [{"role": "developer", "content": "d"}, {"role": "user", "content": "a"},
                {"role": "user", "content": "b"},
                {"role": "assistant", "content": None, "tool_calls": [call("x", {})]},
                {"role": "system", "content": "late"}, {"role": "assistant", "content": "ok"}]
    out = to_anthropic(messages)
    assert out["system"] == "d\n\nlate"
    roles = [t["role"] for t in out["messages"]]
    assert roles == ["user", "assistant", "user", "assistant"]
    assert out["messages"][0]["content"] == [{"type": "text", "text": "a"},
                                             {"type": "text", "text": "b"}]
    assert out["messages"][2]["content"][0]["content"] == "[no result recorded]"


def test_signed_thinking_is_kept_verbatim_and_unsigned_can_be_dropped() -> None:
    blocks = [{"type": "thinking", "thinking": "plan", "signature": "sig=="},
              {"type": "redacted_thinking", "data": "opaque"}]
    anthropic = [{"role": "user", "content": "q"},
                 {"role": "assistant", "content": [*blocks, {"type": "text", "text": "a"}]}]
    messages = from_anthropic(anthropic)
    assert messages[1]["reasoning_content"] == "plan"
    assert messages[1]["thinking_blocks"] == blocks
    assert to_anthropic(messages)["messages"] == anthropic
    unsigned = [{"role": "user", "content": "q"},
                {"role": "assistant", "content": "a", "reasoning": "hmm"}]
    assert to_anthropic(unsigned)["messages"][1]["content"][0] == {"type": "thinking",
                                                                   "thinking": "hmm"}
    dropped = to_anthropic(unsigned, drop_unsigned_thinking=True)
    assert dropped["messages"][1] == {"role": "assistant", "content": "a"}


def test_documents_and_unsupported_parts() -> None:
    pdf = {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBER",
                                    "filename": "spec.pdf"}}
    out = to_anthropic([{"role": "user", "content": [pdf]}])
    block = out["messages"][0]["content"][0]
    assert block == {"type": "document", "title": "spec.pdf", "source": {
        "type": "base64", "media_type": "application/pdf", "data": "JVBER"}}
    assert from_anthropic(out["messages"]) == [{"role": "user", "content": [pdf]}]
    audio = {"type": "input_audio", "input_audio": {"data": "x", "format": "wav"}}
    with pytest.raises(MessageValidationError, match=r"message 1.*'input_audio'"):
        to_anthropic([{"role": "user", "content": "a"}, {"role": "user", "content": [audio]}])


def test_from_anthropic_tool_result_variants_and_errors() -> None:
    anthropic = [{"role": "user", "content": "q"},
                 {"role": "assistant", "content": [
                     {"type": "tool_use", "id": "u1", "name": "shot", "input": {"n": 1}}]},
                 {"role": "user", "content": [
                     {"type": "tool_result", "tool_use_id": "u1", "is_error": True,
                      "content": [{"type": "text", "text": "boom"},
                                  {"type": "image", "source": {"type": "url", "url": "u"}}]},
                     {"type": "text", "text": "next"}]}]
    out = from_anthropic(anthropic, system=[{"type": "text", "text": "S"}])
    assert out[0] == {"role": "system", "content": "S"}
    result = anthropic[2]["content"][0]
    assert out[3] == {"role": "tool", "tool_call_id": "u1", "content": "boom\n[image]",
                      "anthropic_blocks": [result]}  # is_error and the image, kept
    assert to_anthropic(out)["messages"][2]["content"][0] == result
    pruned = {**out[3], "content": "[pruned]"}  # compaction's: the kept block no longer says it
    assert to_anthropic([*out[:3], pruned])["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "u1", "content": "[pruned]", "is_error": True}]
    assert out[4] == {"role": "user", "content": "next"}
    with pytest.raises(MessageValidationError, match="message 0, field 'role'"):
        from_anthropic([{"role": "developer", "content": "x"}])
    # a system turn inside the conversation (Claude Code 2.1 sends its environment so)
    assert from_anthropic([{"role": "user", "content": "hi"}, {"role": "system", "content": [
        {"type": "text", "text": "env"}]}]) == [{"role": "user", "content": "hi"},
                                               {"role": "system", "content": "env"}]
    with pytest.raises(MessageValidationError, match=r"message 0.*'server_tool_use'"):
        from_anthropic([{"role": "user", "content": [{"type": "server_tool_use"}]}])


TEXT = st.text(alphabet=st.sampled_from("ab 你好\n😀"), min_size=1, max_size=8)
ARGS = st.dictionaries(st.sampled_from(["p", "q", "路径"]), st.integers() | TEXT, max_size=2)


@st.composite
def transcripts(draw: st.DrawFn) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if draw(st.booleans()):
        messages.append({"role": "system", "content": draw(TEXT)})
    n = 0
    for _ in range(draw(st.integers(0, 4))):
        messages.append({"role": "user", "content": draw(TEXT)})
        for _ in range(draw(st.integers(0, 2))):
            ids = [f"c{n + k}" for k in range(draw(st.integers(1, 2)))]
            n += len(ids)
            messages.append({"role": "assistant", "content": draw(st.none() | TEXT),
                             "tool_calls": [call(i, draw(ARGS)) for i in ids]})
            messages += [{"role": "tool", "tool_call_id": i, "content": draw(TEXT)} for i in ids]
        messages.append({"role": "assistant", "content": draw(TEXT)})
    return messages


@settings(max_examples=150, deadline=None)
@given(transcripts())
def test_round_trip_property(messages: list[dict[str, Any]]) -> None:
    assert not repair(messages).changed
    out = to_anthropic(messages)
    sides = [t["role"] for t in out["messages"]]
    assert all(a != b for a, b in itertools.pairwise(sides))
    assert from_anthropic(out["messages"], system=out.get("system")) == messages


def test_blocks_the_chat_form_cannot_say_are_kept_while_it_still_says_them() -> None:
    """Server tools' blocks and citations are text in the chat form, and the blocks
    themselves are kept beside it (``KEPT``) and given back as they were — unless the chat
    form changed since (compaction pruned it): then the chat form is what goes."""
    from refold.messages.anthropic import KEPT

    blocks = [{"type": "server_tool_use", "id": "s1", "name": "web_search",
               "input": {"query": "q"}},
              {"type": "web_search_tool_result", "tool_use_id": "s1", "content": {
                  "type": "web_search_tool_result_error", "error_code": "max_uses_exceeded"}},
              {"type": "text", "text": "Nothing.", "citations": None}]
    turns = [{"role": "user", "content": "find"}, {"role": "assistant", "content": blocks}]
    (_, message) = from_anthropic(turns)
    assert [p["text"] for p in message["content"]] == [
        '[server tool use: web_search {"query": "q"}]',
        "[web search tool result]\nerror: max_uses_exceeded", "Nothing."]
    assert message[KEPT] == blocks
    assert to_anthropic([turns[0], message])["messages"] == turns
    pruned = {**message, "content": "[pruned]"}
    assert to_anthropic([turns[0], pruned])["messages"][1] == {"role": "assistant",
                                                               "content": "[pruned]"}
    # a plain reply keeps nothing beside it
    assert KEPT not in from_anthropic([{"role": "assistant", "content": [
        {"type": "text", "text": "a", "citations": None}]}])[0]


def test_a_text_tool_result_is_kept_without_its_text() -> None:
    """Claude Code marks every result ``is_error`` (false, mostly): kept whole, each tool
    output would be stored twice. A text result's block is kept without its text, which goes
    back from the tool message — pruned or not, the result still failed."""
    from refold.messages.anthropic import KEPT

    use = {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "x",
                                             "input": {}}]}
    for block in ({"type": "tool_result", "tool_use_id": "t", "is_error": False,
                   "content": "out"},
                  {"type": "tool_result", "tool_use_id": "t", "is_error": True}):
        turns = [use, {"role": "user", "content": [block]}]
        messages = from_anthropic(turns)
        assert messages[1][KEPT] == [{k: v for k, v in block.items() if k != "content"}]
        assert to_anthropic(messages)["messages"] == turns
    pruned = [messages[0], {**messages[1], "content": "[pruned]"}]
    assert to_anthropic(pruned)["messages"][1]["content"][0] == {
        "type": "tool_result", "tool_use_id": "t", "is_error": True, "content": "[pruned]"}


BLOCK_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from([0.0, -0.0, 1.0, 1.5])
    | TEXT, lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.sampled_from(["a", "b", "路径"]), inner, max_size=3), max_leaves=8)
ASSISTANT_BLOCKS = st.lists(st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, TEXT),
    st.builds(lambda t, c: {"type": "text", "text": t, "citations": c}, TEXT,
              st.none() | st.lists(st.fixed_dictionaries({"cited_text": TEXT}), max_size=1)),
    st.builds(lambda i, v: {"type": "tool_use", "id": f"toolu_{i}", "name": "Bash",
                            "input": v}, st.integers(0, 3),
              st.dictionaries(st.sampled_from(["a", "b", "路径"]), BLOCK_VALUES, max_size=3)),
    st.builds(lambda t, s: {"type": "thinking", "thinking": t, "signature": s}, TEXT, TEXT),
), min_size=1, max_size=4)


@settings(max_examples=300, deadline=None)
@given(st.lists(ASSISTANT_BLOCKS, min_size=1, max_size=4))
def test_assistant_turns_seen_before_convert_as_the_first_time(
        turns: list[list[dict[str, Any]]]) -> None:
    """The proxy converts a request's assistant turns through a per-process memo (a client
    re-sends each earlier turn with every request): the same messages, to the type (``1``,
    ``1.0`` and ``True`` apart), and a caller editing what it got changes no later answer."""
    history = [{"role": m, "content": blocks} for blocks in turns
               for m in ("user", "assistant")]
    for message in history[::2]:
        message["content"] = "next"
    plain = from_anthropic(json.loads(json.dumps(history)))
    for _ in range(2):
        got = from_anthropic(json.loads(json.dumps(history)), memo=True)
        assert repr(got) == repr(plain)
        for message in got:  # editing an answer must not reach the memo
            message.clear()


def test_the_memo_tells_numbers_apart_and_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from refold.messages import anthropic

    def turn(value: Any) -> list[dict[str, Any]]:
        return [{"role": "assistant", "content": [
            {"type": "tool_use", "id": "t1", "name": "grep", "input": {"n": value}}]}]

    spelled = [from_anthropic(turn(v), memo=True)[0]["tool_calls"][0]["function"]["arguments"]
               for v in (1, 1.0, True, 1, 1.0, True)]
    assert spelled == ['{"n": 1}', '{"n": 1.0}', '{"n": true}'] * 2
    memo = anthropic._Converted()
    monkeypatch.setattr(anthropic, "_CONVERTED", memo)
    monkeypatch.setattr(memo, "ENTRIES", 5)
    for n in range(20):
        from_anthropic(turn(n), memo=True)
    assert len(memo.held) == 5 and memo.chars == sum(map(len, memo.held))
    monkeypatch.setattr(memo, "CHARS", 3 * len(repr(turn(0)[0]["content"])))
    from_anthropic(turn(99), memo=True)
    assert len(memo.held) <= 3 and memo.chars <= memo.CHARS
    big = [{"role": "assistant", "content": [{"type": "text", "text": "x" * 40_000}]}]
    assert from_anthropic(big, memo=True) == from_anthropic(big)
    assert repr(big[0]["content"]) not in memo.held


USER_BLOCKS = st.lists(st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, TEXT),
    st.builds(lambda i, c, e: {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": c,
                               **({"is_error": e} if e is not None else {})},
              st.integers(0, 3), TEXT | st.lists(st.fixed_dictionaries(
                  {"type": st.just("text"), "text": TEXT}), max_size=2),
              st.none() | st.booleans()),
), min_size=1, max_size=3)
TURN = st.one_of(st.builds(lambda b: {"role": "user", "content": b}, USER_BLOCKS | TEXT),
                 st.builds(lambda b: {"role": "assistant", "content": b}, ASSISTANT_BLOCKS),
                 st.builds(lambda t: {"role": "system", "content": t}, TEXT))
STEP = st.one_of(
    st.tuples(st.just("extend"), st.integers(0, 2), st.lists(TURN, min_size=1, max_size=3)),
    st.tuples(st.just("edit"), st.integers(0, 2), st.integers(0, 30), TURN),
    st.tuples(st.just("retype"), st.integers(0, 2), st.integers(0, 30)),  # 1 -> True, 0 -> 0.0
    st.tuples(st.just("retry"), st.integers(0, 2)),
    st.tuples(st.just("fork"), st.integers(0, 2), st.integers(0, 2), st.integers(0, 30)),
    st.tuples(st.just("drop"), st.integers(0, 2), st.integers(0, 30)),
)


def _retyped(value: Any) -> Any:
    """``value`` with each number or boolean as one ``==`` holds equal (1 <-> True, ...)."""
    if isinstance(value, dict):
        return {k: _retyped(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_retyped(v) for v in value]
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return True if value == 1 else float(value)
    if isinstance(value, float):
        return -value if value == 0 else value
    return value


@settings(max_examples=200, deadline=None)
@given(st.lists(STEP, min_size=1, max_size=12))
def test_requests_converted_through_the_prefix_memo_equal_a_fresh_conversion(
        steps: list[tuple[Any, ...]]) -> None:
    """The proxy converts each request's leading messages that a recent request held exactly
    (``_Prefixes``): conversations that extend, retry, are edited in the middle (also where
    only a number's type changed: ``1`` for ``True``), fork from another's opening or drop
    their tail, interleaved, each convert as they would the first time, to the type; and a
    caller editing what it got, or what it sent, changes no later answer."""
    conversations: list[list[dict[str, Any]]] = [
        [{"role": "user", "content": "open"}] for _ in range(3)]
    for step in steps:
        kind, which = step[0], step[1]
        history = conversations[which]
        if kind == "extend":
            history += step[2]
        elif kind == "edit" and history:
            history[step[2] % len(history)] = step[3]
        elif kind == "retype" and history:
            at = step[2] % len(history)
            history[at] = _retyped(history[at])
        elif kind == "fork":
            source = conversations[step[2]]
            conversations[which] = json.loads(json.dumps(source[:step[3] % (len(source) + 1)]))
        elif kind == "drop":
            del history[step[2] % (len(history) + 1):]
        sent = conversations[which]
        if not sent:
            continue
        plain = from_anthropic(json.loads(json.dumps(sent)))
        request = json.loads(json.dumps(sent))
        got = from_anthropic(request, memo=True)
        assert repr(got) == repr(plain)
        for message in got + request:  # editing an answer or the request must not reach
            message.clear()            # the memo


def test_a_request_extending_the_last_one_converts_only_its_new_messages(
        native_jsonscan: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from refold.messages import anthropic

    memo = anthropic._Prefixes()
    monkeypatch.setattr(anthropic, "_PREFIXES", memo)
    history: list[dict[str, Any]] = [{"role": "user", "content": "find the bug"}]
    converted: list[int] = []
    real = anthropic._chat_of
    monkeypatch.setattr(anthropic, "_chat_of", lambda turn, index, memo: (
        converted.append(index), real(turn, index, memo))[1])
    for turn in range(4):
        history += [{"role": "assistant", "content": [
                        {"type": "tool_use", "id": f"t{turn}", "name": "Bash",
                         "input": {"n": 1, "flag": True}}]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": f"t{turn}", "content": "out"}]}]
        converted.clear()
        from_anthropic(json.loads(json.dumps(history)), memo=True)
        assert converted == ([0] if turn == 0 else []) + [len(history) - 2, len(history) - 1]
    assert len(memo.held) == 1  # each request replaced the one it extended
    assert memo.held[0].sizes == [len(repr(m)) for m in history]
    retyped = json.loads(json.dumps(history))
    retyped[3]["content"][0]["input"]["n"] = True  # == the held one, but not the same
    converted.clear()
    got = from_anthropic(retyped, memo=True)
    assert converted == list(range(3, len(history)))
    assert '"n": true' in got[3]["tool_calls"][0]["function"]["arguments"]


def test_a_request_edited_in_place_after_its_conversion_does_not_reach_the_memo(
        native_jsonscan: None) -> None:
    sent = [{"role": "user", "content": "which file?"},
            {"role": "assistant", "content": [{"type": "text", "text": "main.py"}]}]
    from_anthropic(sent, memo=True)
    sent[1]["content"][0]["text"] = "setup.py"  # the caller reuses its objects
    again = json.loads(json.dumps(sent))
    assert from_anthropic(again, memo=True)[1]["content"] == "setup.py"


def test_the_prefix_memo_stays_bounded(native_jsonscan: None,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from refold.messages import anthropic

    memo = anthropic._Prefixes()
    monkeypatch.setattr(anthropic, "_PREFIXES", memo)
    monkeypatch.setattr(memo, "ENTRIES", 4)
    for n in range(10):  # ten conversations of their own
        from_anthropic([{"role": "user", "content": f"conversation {n}"}], memo=True)
    assert len(memo.held) == 4
    long = [{"role": "user" if i % 2 == 0 else "assistant", "content": "m" * 100}
            for i in range(25)]
    monkeypatch.setattr(memo, "CHARS", sum(len(repr(m)) for m in long) + 100)
    from_anthropic(long, memo=True)
    assert sum(e.chars for e in memo.held) <= memo.CHARS and memo.held[-1].raw == long
    from_anthropic([*long, {"role": "assistant", "content": "x" * 200}], memo=True)
    assert memo.held == []  # over the bound alone: nothing held
