"""``assert_sent_as_client_sent`` with a message the client sent twice.

A client may repeat itself (a user says "continue" each turn) or reuse its tool-call ids
(``call_0`` each turn, as some models number their calls). Each received message was looked up
at its first place in what the client sent, so the second "continue" was found before the first
and the helper raised ``("out of the client's order", …)`` for an upstream that received exactly
what the client sent. A message is now matched at its next place after the last one matched;
a received order that is really not the client's still fails.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from refold.testing import assert_sent_as_client_sent

Message = dict[str, Any]
REPEATED: list[Message] = [
    {"role": "system", "content": "s"},
    {"role": "user", "content": "continue"}, {"role": "assistant", "content": "step 1"},
    {"role": "user", "content": "continue"}, {"role": "assistant", "content": "step 2"},
    {"role": "user", "content": "summarize"}]


def _call(index: int, city: str) -> dict[str, Any]:
    return {"id": f"call_{index}", "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps({"city": city})}}


CALLS = {"role": "assistant", "content": None, "tool_calls": [_call(0, "Paris"), _call(1, "Rome")]}
REUSED_IDS: list[Message] = [
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "weather paris and rome"}, CALLS,
    {"role": "tool", "tool_call_id": "call_0", "content": "sunny"},
    {"role": "tool", "tool_call_id": "call_1", "content": "rainy"},
    {"role": "assistant", "content": "Paris sunny, Rome rainy."},
    {"role": "user", "content": "and tomorrow?"}, dict(CALLS),
    {"role": "tool", "tool_call_id": "call_0", "content": "cloudy"},
    {"role": "tool", "tool_call_id": "call_1", "content": "windy"}]


def test_a_message_sent_twice_received_as_sent() -> None:
    assert_sent_as_client_sent(REPEATED, REPEATED)
    assert_sent_as_client_sent(REPEATED[3:], REPEATED)  # a window starting at the second


def test_reused_tool_call_ids_received_as_sent() -> None:
    assert_sent_as_client_sent(REUSED_IDS, REUSED_IDS)
    pruned = [dict(m, content="[get_weather] -> 1 lines") if m.get("role") == "tool" else m
              for m in REUSED_IDS]
    pruned[-2:] = REUSED_IDS[-2:]  # the old outputs pruned, the last turn's as sent
    assert_sent_as_client_sent(pruned, REUSED_IDS)
    long_args = [dict(m, tool_calls=[dict(c, function=dict(c["function"], arguments="{}"))
                                     for c in m["tool_calls"]]) if m.get("tool_calls") else m
                 for m in REUSED_IDS]
    assert_sent_as_client_sent(long_args, REUSED_IDS)  # both call turns' arguments pruned


@pytest.mark.parametrize(("received", "sent"), [
    ([REPEATED[1], REPEATED[4], REPEATED[3], REPEATED[2], REPEATED[5]], REPEATED),
    ([REPEATED[1], REPEATED[3], REPEATED[2], REPEATED[5]], REPEATED),
    ([REPEATED[1], REPEATED[2], REPEATED[3], REPEATED[4], REPEATED[3], REPEATED[5]],
     REPEATED),  # "continue" once more than the client said it
    ([REUSED_IDS[6], *REUSED_IDS[2:5], *REUSED_IDS[7:10]], REUSED_IDS),  # an old result later
], ids=["steps-swapped", "answer-before-question", "repeated-once-more", "old-results-later"])
def test_an_order_that_is_not_the_clients_still_fails(received: list[Message],
                                                      sent: list[Message]) -> None:
    with pytest.raises(AssertionError, match="out of the client's order"):
        assert_sent_as_client_sent(received, sent)
