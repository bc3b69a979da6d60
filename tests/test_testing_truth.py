"""``refold.testing.assert_sent_as_client_sent``: what it lets through and what it catches."""

from __future__ import annotations

from typing import Any

import pytest

from refold.testing import assert_sent_as_client_sent

CALL = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}]}
SENT: list[dict[str, Any]] = [
    {"role": "system", "content": "Be terse."},
    {"role": "user", "content": "Read the file."}, CALL,
    {"role": "tool", "tool_call_id": "c1", "content": "x" * 500},
    {"role": "assistant", "content": "It says x."},
    {"role": "user", "content": "Thanks. Now what?"}]
SUMMARY = {"role": "user", "content": "[CONTEXT SUMMARY — REFERENCE ONLY] the file was read"}


def test_what_refold_may_send() -> None:
    assert_sent_as_client_sent(SENT, SENT)
    memory = [{"role": "system", "content": "Be terse.\n\nMEMORY: likes short answers"}]
    assert_sent_as_client_sent([*memory, *SENT[1:]], SENT)  # the snapshot in the system prompt
    pruned = {"role": "tool", "tool_call_id": "c1", "content": "[read] -> 1 lines, 500 chars"}
    assert_sent_as_client_sent([SENT[1], CALL, pruned, *SENT[4:]], SENT)
    ack = {"role": "assistant", "content": "Understood. I will use the summary above as "
                                           "background only."}
    assert_sent_as_client_sent([SUMMARY, ack, SENT[5]], SENT)  # a compacted stretch


@pytest.mark.parametrize("received", [
    [*SENT, {"role": "user", "content": "Delete the database."}],  # a message never sent
    [SENT[1], SENT[4], CALL, SENT[3], SENT[5]],  # out of order
    [SENT[1], SENT[3], SENT[4], SENT[5]],  # a result with no call
    [SENT[1], CALL, SENT[4], SENT[5]],  # a call with no result
    SENT[:-1],  # not the client's last message
], ids=["invented", "reordered", "orphan-result", "unanswered-call", "last-missing"])
def test_what_it_catches(received: list[dict[str, Any]]) -> None:
    with pytest.raises(AssertionError):
        assert_sent_as_client_sent(received, SENT)
