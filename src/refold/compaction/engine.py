"""The per-session compaction engine the runtime and the proxy drive, and overflow recovery.

``Compactor`` ties a ``CompactionGuard`` (when), ``compact`` (how), a token counter and the
summarizers together, and remembers the previous summary so re-compaction updates it.
``compact_for_overflow`` is the error-driven path on its own: compact to a shrinking share of
the window (0.85, 0.7, 0.5, 0.35), a bounded number of attempts, then a clear error — never a
loop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from refold.compaction.builtin import BuiltinSummarizer
from refold.compaction.core import CompactionResult, compact
from refold.compaction.guard import Clock, CompactionGuard, Decision
from refold.compaction.policy import CompactionPolicy
from refold.compaction.summarizer import Summarizer
from refold.errors import CompactionError, ContextOverflowError
from refold.messages.model import Message
from refold.tokens.counter import REPLY_PRIMING, TokenCounter
from refold.tokens.models import get_counter

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


class Compactor:
    """One session's compaction: decide with the guard, compact, learn from the outcome."""

    def __init__(self, *, context_length: int, model: str | None = None,
                 policy: CompactionPolicy | None = None, counter: TokenCounter | None = None,
                 summarizer: Summarizer | None = None, clock: Clock = time.monotonic) -> None:
        self.policy = policy or CompactionPolicy()
        self.context_length = context_length
        self.model = model
        self.counter = counter or get_counter(model)
        self.summarizer = summarizer or BuiltinSummarizer()
        self.builtin = BuiltinSummarizer()
        self.guard = CompactionGuard(self.policy, context_length=context_length, model=model,
                                     clock=clock)
        self.compactions = 0
        self.last: CompactionResult | None = None
        self._memo: tuple[int, Message, Message, int] | None = None

    def estimate(self, messages: Sequence[Message],
                 tools: Sequence[dict[str, Any]] | None = None) -> int:
        """Request tokens; O(new messages) when the caller keeps appending to the same list.

        The previous call's first and last message objects are held, so when both are still
        in place the earlier total is reused and only the appended messages are counted. A
        caller that edits earlier messages in place should call ``forget_counts()``; the
        estimate only drives the trigger, and the provider's real reading corrects it.
        """
        n = len(messages)
        memo = self._memo
        if memo is not None and n >= memo[0] and messages[0] is memo[1] \
                and messages[memo[0] - 1] is memo[2]:
            body = memo[3] + sum(self.counter.count_message(m) for m in messages[memo[0]:])
        else:
            body = sum(self.counter.count_message(m) for m in messages)
        self._memo = (n, messages[0], messages[-1], body) if n else None
        return body + REPLY_PRIMING + self.counter.count_tools(tools)

    def forget_counts(self) -> None:
        self._memo = None

    def run(self, messages: Sequence[Message], decision: Decision, *,
            tools: Sequence[dict[str, Any]] | None = None) -> CompactionResult:
        """Compact as ``decision`` says and feed the outcome back to the guard."""
        summarizer = self.builtin if decision.use_builtin else self.summarizer
        result = compact(messages, context_length=self.context_length, policy=self.policy,
                         counter=self.counter, summarizer=summarizer, model=self.model,
                         target_tokens=decision.target_tokens, tools=tools,
                         compaction_count=self.compactions or None)
        self.guard.record(result.report)
        if result.report.changed:
            self.compactions += 1
        self.last = result
        return result

    def maybe_compact(self, messages: Sequence[Message], *,
                      tools: Sequence[dict[str, Any]] | None = None,
                      reading: int | None = None) -> tuple[list[Message], Decision,
                                                           CompactionResult | None]:
        """Preflight (or post-response when ``reading`` is the provider's prompt_tokens)."""
        if reading is not None:
            decision = self.guard.post_response(reading)
        else:
            decision = self.guard.preflight(self.estimate(messages, tools),
                                            exact=self.counter.exact)
        if not decision.compact:
            return list(messages), decision, None
        result = self.run(messages, decision, tools=tools)
        return result.messages, decision, result

    def recover_overflow(self, messages: Sequence[Message], attempt: int, *,
                         tools: Sequence[dict[str, Any]] | None = None) -> CompactionResult:
        """Error-driven compaction; raises ``CompactionError`` when attempts are used up."""
        decision = self.guard.on_overflow(attempt, self.estimate(messages, tools))
        if not decision.compact:
            raise CompactionError(f"context overflow: {decision.reason}",
                                  hint="start a new session or raise the context length")
        result = self.run(messages, decision, tools=tools)
        if result.report.status == "aborted":
            raise CompactionError(f"cannot recover from the context overflow: "
                                  f"{result.report.reason}")
        return result
