"""Overflow recovery on a plain message list (the runtime's own path is ``refold.runtime``).

``compact_for_overflow`` is the error-driven path: compact to a shrinking share of
the window (0.85, 0.7, 0.5, 0.35), a bounded number of attempts, then a clear error — never a
loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from refold.compaction.core import CompactionResult, compact
from refold.compaction.policy import CompactionPolicy
from refold.compaction.summarizer import Summarizer
from refold.errors import CompactionError, ContextOverflowError
from refold.messages.model import Message
from refold.tokens.counter import TokenCounter

log = logging.getLogger(__name__)
T = TypeVar("T")


def compact_for_overflow(messages: Sequence[Message], attempt: int, *, context_length: int,
                         policy: CompactionPolicy | None = None,
                         counter: TokenCounter | None = None,
                         summarizer: Summarizer | None = None, model: str | None = None,
                         tools: Sequence[dict[str, Any]] | None = None,
                         previous_summary: str | None = None) -> CompactionResult:
    """Compact after the provider rejected ``messages`` as too long (``attempt`` from 0).

    Raises ``CompactionError`` when the attempts are used up or nothing more can be removed.
    """
    policy = policy or CompactionPolicy()
    targets = policy.overflow_targets
    if attempt >= len(targets):
        raise CompactionError(
            f"the conversation is still too long for the model after {len(targets)} compaction "
            "attempts", hint="start a new session, or raise the model's context length")
    target = max(1, int(context_length * targets[attempt]))
    result = compact(messages, context_length=context_length, policy=policy, counter=counter,
                     summarizer=summarizer, model=model, target_tokens=target, tools=tools,
                     previous_summary=previous_summary)
    report = result.report
    if report.status == "aborted":
        raise CompactionError(f"cannot recover from the context overflow: {report.reason}",
                              hint="fix the summary model's configuration or use the builtin "
                                   "summarizer")
    if not report.changed and attempt + 1 >= len(targets):
        raise CompactionError(f"the conversation cannot be made smaller: {report.reason}",
                              hint="start a new session")
    return result


def complete_with_overflow_recovery(
        send: Callable[[list[Message]], T], messages: Sequence[Message], *,
        context_length: int, policy: CompactionPolicy | None = None,
        counter: TokenCounter | None = None, summarizer: Summarizer | None = None,
        model: str | None = None, tools: Sequence[dict[str, Any]] | None = None
        ) -> tuple[T, list[Message]]:
    """Call ``send(messages)``; on ``ContextOverflowError`` compact to the next shrinking target
    and call again — at most ``len(policy.overflow_targets)`` retries, then ``CompactionError``.

    Returns ``(send's result, the messages that were finally sent)``.
    """
    policy = policy or CompactionPolicy()
    current = list(messages)
    for attempt in range(len(policy.overflow_targets) + 1):
        try:
            return send(current), current
        except ContextOverflowError:
            log.info("provider overflow; compaction attempt %d", attempt + 1)
            current = compact_for_overflow(current, attempt, context_length=context_length,
                                           policy=policy, counter=counter,
                                           summarizer=summarizer, model=model,
                                           tools=tools).messages
    raise AssertionError("unreachable: compact_for_overflow raises when attempts run out")
