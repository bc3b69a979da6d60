"""The ``Summarizer`` seam: what a summarizer is given and what it returns.

A summarizer writes only the template body (the sections); the compaction core adds the
reference-only prefix, the anchor index and the end marker, so every summarizer's output is
framed the same way. Failures are ``SummarizerError``: ``retryable=True`` lets the core fall
back to the builtin summarizer, ``False`` aborts the compaction and leaves the transcript as is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from refold._records import dataclass, field
from refold.messages.model import Message
from refold.tokens.counter import TokenCounter


@dataclass(frozen=True)
class SummaryRequest:
    turns: Sequence[Message]  # the original messages being replaced
    pruned_turns: Sequence[Message]  # the same span after the cheap prune (LLM input)
    prefix: Sequence[Message]  # system + head + turns as the model saw them (cache replay)
    previous_summary: str | None  # body of the summary being updated, if any
    language: str  # "en" | "zh" | "ja"
    budget_tokens: int
    counter: TokenCounter
    tools: Sequence[dict[str, Any]] | None = None
    # text memory providers asked to keep (``MemoryProvider.on_pre_compress``): plain reference
    # material, already stripped, deduplicated and bounded by ``compact``; () = none
    provider_notes: tuple[str, ...] = ()
    # a request sent while the work went on, kept verbatim just before the summary (the last
    # of ``prefix`` ahead of ``turns``): how many of ``turns`` came before it, the rest after
    # (0: none was moved, the prefix is in order). The summary should not read as work that
    # only began after it.
    request_midway: int = 0


@dataclass(frozen=True)
class SummaryDraft:
    body: str
    summarizer: str  # "builtin" | "llm:<model>"
    warnings: tuple[str, ...] = ()
    usage: dict[str, int] = field(default_factory=dict)


@runtime_checkable
class Summarizer(Protocol):
    name: str

    def summarize(self, request: SummaryRequest) -> SummaryDraft: ...
