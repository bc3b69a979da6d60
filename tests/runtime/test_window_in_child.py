"""A sliding window of a rotated conversation, in its child's terms
(``refold.runtime.rotation.window_in_child``): the window's covered part becomes the child's
carried rows from the first one it still holds (a kept tail row, a kept head row, else the
summary); a window that does not line up with the carried rows is not translated."""

from __future__ import annotations

from typing import Any

from refold.compaction.core import ACK
from refold.compaction.summary import wrap_summary
from refold.messages.model import message_identity
from refold.runtime.rotation import window_in_child


def user(n: int) -> dict[str, Any]:
    return {"role": "user", "content": f"question {n}"}


def reply(n: int) -> dict[str, Any]:
    return {"role": "assistant", "content": f"answer {n}"}


CONVERSATION = [m for n in range(10) for m in (user(n), reply(n))]  # 20 messages
SUMMARY = {"role": "user", "content": wrap_summary("what happened in turns 1 to 6", [], "en")}
# the parent's view when it rotated: head (turn 0), summary, kept rows (turns 7 to 9)
CARRIED = [user(0), reply(0), SUMMARY, *CONVERSATION[14:]]
LAST = message_identity(CONVERSATION[-1], None)
NEW = [user(10), reply(10), user(11)]  # the child's own rows since, and a new question


def test_a_window_that_starts_among_the_kept_rows() -> None:
    found = window_in_child(CARRIED, LAST, [*CONVERSATION[16:], *NEW])
    assert found == (len(CARRIED) - 4, [*CONVERSATION[16:], *NEW])


def test_a_window_that_starts_in_the_summarized_stretch_goes_from_the_summary() -> None:
    found = window_in_child(CARRIED, LAST, [*CONVERSATION[5:], *NEW])
    assert found == (2, [SUMMARY, *CONVERSATION[14:], *NEW])


def test_a_window_that_still_holds_kept_head_rows_starts_with_them() -> None:
    found = window_in_child(CARRIED, LAST, [*CONVERSATION[1:], *NEW])
    assert found == (1, [reply(0), SUMMARY, *CONVERSATION[14:], *NEW])
    assert window_in_child(CARRIED, LAST, [*CONVERSATION, *NEW]) == (0, [*CARRIED, *NEW])


def test_an_acknowledged_summary_is_one_block() -> None:
    ack = {"role": "assistant", "content": ACK["assistant"]}
    carried = [SUMMARY, ack, *CONVERSATION[14:]]
    found = window_in_child(carried, LAST, [*CONVERSATION[5:], *NEW])
    assert found == (0, [*carried, *NEW])


def test_a_summary_acknowledged_in_the_words_of_before_is_one_block_too() -> None:
    """The user's acknowledgement was reworded ("…with the latest request below" claimed a
    request that an agent's tool loop does not have after the summary): children rotated
    before hold the old words, and still read as one block with their summary."""
    assistant_summary = {**SUMMARY, "role": "assistant"}
    for words in ("Continue from the summary above with the latest request below.",
                  ACK["user"]):
        carried = [user(0), assistant_summary, {"role": "user", "content": words},
                   *CONVERSATION[15:]]
        found = window_in_child(carried, LAST, [*CONVERSATION[5:], *NEW])
        assert found == (1, [*carried[1:], *NEW]), words


def test_windows_that_do_not_line_up_are_not_translated() -> None:
    assert window_in_child(CARRIED, LAST, [user(10), reply(10), user(11)]) is None  # no cover
    edited = [*CONVERSATION[5:15], {"role": "assistant", "content": "edited"},
              *CONVERSATION[16:], *NEW]
    assert window_in_child(CARRIED, LAST, edited) is None  # a kept row differs
    assert window_in_child([*CONVERSATION[14:]], LAST, [*CONVERSATION[5:], *NEW]) is None
    assert window_in_child(CARRIED, "", [*CONVERSATION[5:], *NEW]) is None


def test_a_reply_said_again_later_is_not_taken_for_the_covered_one() -> None:
    same = {"role": "assistant", "content": "answer 9"}  # the covered reply's text, again
    window = [*CONVERSATION[5:], user(10), same, user(11)]
    found = window_in_child(CARRIED, LAST, window)
    assert found == (2, [SUMMARY, *CONVERSATION[14:], user(10), same, user(11)])
