"""``strip_cache_control``: the request without its ``cache_control`` markers and where they
were, leaving the client's body as it came (only what held a marker is copied); with the C scan
(``refold._jsonscan``) as with the Python passes, and ``check_fields``' text blocks so too."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refold import jsonscan
from refold.errors import InvalidInput
from refold.server.anthropic_wire import strip_cache_control
from refold.server.messages_api import check_fields

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


# -- the scan in C (refold._jsonscan.anthropic_blocks) against the Python passes ---------------

_TEXTS = st.one_of(st.text(max_size=3), st.none(), st.integers(0, 2))  # a bad text now and then
_BLOCK = st.one_of(
    st.builds(lambda t, m: {"type": "text", "text": t, **m}, _TEXTS,
              st.sampled_from([{}, {}, {"cache_control": MARK}])),
    st.builds(lambda m: {"type": "text", **m}, st.sampled_from([{}, {"cache_control": MARK}])),
    st.builds(lambda c, m: {"type": "tool_result", "tool_use_id": "t", "content": c, **m},
              st.text(max_size=3) | st.lists(st.builds(
                  lambda t: {"type": "text", "text": t}, _TEXTS), max_size=2),
              st.sampled_from([{}, {"cache_control": MARK}])),
    st.builds(lambda m: {"type": "image", "source": {}, **m},
              st.sampled_from([{}, {"cache_control": MARK}])),
    st.just("not a block"))
_TURN = st.one_of(
    st.builds(lambda r, c: {"role": r, "content": c}, st.sampled_from(["user", "assistant",
                                                                       "system"]),
              st.text(max_size=3) | st.lists(_BLOCK, max_size=3)),
    st.just("not a message"), st.builds(lambda: {"role": "user"}))


def _both(call: Any) -> tuple[Any, Any]:
    """``call()`` with the C scan (where built) and with the Python passes: result or error."""
    out = []
    for native in (True, False):
        with pytest.MonkeyPatch.context() as patch:
            if not native:
                patch.setattr(jsonscan, "_native", None)
            try:
                result = call()
            except InvalidInput as exc:
                result = ("error", str(exc))
        out.append(result)
    return out[0], out[1]


@pytest.mark.usefixtures("native_jsonscan")
@settings(max_examples=400, deadline=None)
@given(st.lists(_TURN, max_size=8))
def test_the_markers_and_bad_text_blocks_found_in_c_are_the_python_passes(
        turns: list[Any]) -> None:
    sent = {"model": "m", "max_tokens": 5, "messages": turns}
    fast, slow = _both(lambda: strip_cache_control(copy.deepcopy(sent)))
    assert repr(fast[0]) == repr(slow[0]) and fast[1] == slow[1]
    fast, slow = _both(lambda: check_fields(copy.deepcopy(sent)))
    assert fast == slow
