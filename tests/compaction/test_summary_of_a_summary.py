"""A plan whose summarized stretch holds only the previous summary and its acknowledgement
has nothing new to summarize.

Planned in the background right after a compaction (a real Claude Code run through
``refold serve``, replayed: 4 of its 22 turns), each such plan asked the summarizer for a summary
of the summary, which could not be stored (its cut fell inside the previous checkpoint): with a
model summarizer, a paid call each time for nothing."""

from __future__ import annotations

from typing import Any

from refold.compaction import compact
from refold.compaction.builtin import BuiltinSummarizer
from refold.compaction.summary import ACK, is_summary_message


class Counting(BuiltinSummarizer):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def summarize(self, request: Any) -> Any:
        self.calls += 1
        return super().summarize(request)


def _history(steps: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."},
                                      {"role": "user", "content": "Fix the failing test"}]
    for i in range(steps):
        messages += [{"role": "assistant", "content": None, "tool_calls": [
                         {"id": f"c{i}", "type": "function", "function": {
                             "name": "bash", "arguments": f'{{"command": "cat part{i}.txt"}}'}}]},
                     {"role": "tool", "tool_call_id": f"c{i}",
                      "content": f"part {i}: " + " ".join(f"w{j}" for j in range(150))}]
    return messages


def test_nothing_new_between_the_head_and_the_tail_asks_no_summary() -> None:
    # a runtime's view right after a compaction: the head, the summary and its acknowledgement,
    # the kept tail
    summary = next(m for m in compact(_history(40), context_length=8000).messages
                   if is_summary_message(m))
    history = _history(40)
    view = [*history[:2], {"role": "assistant", "content": summary["content"]},
            {"role": "user", "content": ACK["user"]}, *history[-4:]]
    summarizer = Counting()
    again = compact(view, context_length=2000, summarizer=summarizer)  # over its threshold
    middle = view[again.report.head_end:again.report.tail_start]
    assert middle and all(map(is_summary_message, middle))  # only the summary to summarize
    assert summarizer.calls == 0  # (before: one, for a summary that was never stored)
    assert again.report.summary is None and again.report.status in ("noop", "pruned")
    more = compact(view + history[2:10], context_length=2000, summarizer=summarizer)
    assert summarizer.calls == 1 and more.report.summary is not None  # new work: summarized
