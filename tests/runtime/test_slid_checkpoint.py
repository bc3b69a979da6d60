"""A checkpoint planned from one sliding window, applied to a later one
(``refold.runtime.mirror.slid_checkpoint``): the kept head loses the rows that slid out, counted
in active rows (a rewind leaves gaps in the seqs), and a head that does not line up with the
rows it copies is not trimmed at all."""

from __future__ import annotations

from typing import Any

from refold.runtime.mirror import head_start, slid_checkpoint
from refold.store.base import Checkpoint, StoredMessage


def row(seq: int, message: dict[str, Any]) -> StoredMessage:
    return StoredMessage("s", seq, message, f"id{seq}", None, 0.0, True)


HEAD = [{"role": "user", "content": "q1"},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "call_1", "type": "function",
                         "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "pruned"}]


def checkpoint(window: int | None, first_seq: int, head: list[dict[str, Any]]) -> Checkpoint:
    details: dict[str, Any] = {"head": head, "block": [{"role": "user", "content": "summary"}]}
    if window is not None:
        details["window"] = window
    return Checkpoint(summary="summary", first_seq=first_seq, last_seq=20, tail_start_seq=21,
                      details=details, id=7, session_id="s")


def test_the_head_loses_the_rows_that_slid_out_counted_in_active_rows() -> None:
    # seq 6 was rewound: the active rows of the stretch are 5, 7, 8, ...
    rows = [row(5, HEAD[0]), row(7, HEAD[1]), row(8, {**HEAD[2], "content": "whole output"}),
            *(row(s, {"role": "user", "content": f"m{s}"}) for s in range(9, 21))]
    cp = checkpoint(5, 5, HEAD)
    assert head_start(cp) == 5
    assert slid_checkpoint(cp, 5, rows) is cp
    moved = slid_checkpoint(cp, 7, rows)
    assert moved is not None and moved.details["head"] == HEAD[1:]
    assert moved.details["block"] == cp.details["block"] and moved.id == cp.id
    assert cp.details["head"] == HEAD  # the stored checkpoint is left as it was
    past = slid_checkpoint(cp, 12, rows)
    assert past is not None and past.details["head"] == []


def test_a_checkpoint_of_the_whole_conversation_starts_at_its_first_summarized_row() -> None:
    rows = [row(s, m) for s, m in zip((1, 2, 3), HEAD, strict=True)]
    cp = checkpoint(None, 1, HEAD)
    assert head_start(cp) == 1
    moved = slid_checkpoint(cp, 3, rows)
    assert moved is not None and moved.details["head"] == HEAD[2:]


def test_a_head_that_does_not_line_up_with_its_rows_is_not_trimmed() -> None:
    shifted = [row(5, HEAD[1]), row(6, HEAD[0]), row(7, HEAD[2])]
    assert slid_checkpoint(checkpoint(5, 5, HEAD), 6, shifted) is None
    assert slid_checkpoint(checkpoint(5, 5, HEAD), 6, shifted[:2]) is None  # head outgrows them
