"""Layer 1: compaction of one session's context window.

    from refold.compaction import compact, CompactionPolicy
    result = compact(messages, context_length=128_000, model="gpt-4o")
    result.messages, result.report

``compact`` is pure (the summarizer is the only seam that may do I/O); ``CompactionGuard``
decides when to run it; ``compact_session`` applies it to a stored session.

The names load on first use (PEP 562), so importing ``refold.compaction.policy`` (settings)
does not pay for the summarizers and their HTTP client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from refold._lazy import lazy_names

if TYPE_CHECKING:
    from refold.compaction.builtin import BuiltinSummarizer
    from refold.compaction.core import CompactionReport, CompactionResult, compact
    from refold.compaction.engine import compact_for_overflow, complete_with_overflow_recovery
    from refold.compaction.guard import CompactionGuard, Decision, GuardStatus
    from refold.compaction.llm_summarizer import LLMSummarizer
    from refold.compaction.policy import CompactionPolicy, ModelOverride, Threshold, threshold_for
    from refold.compaction.session import (
        ContextBreakdown,
        SessionCompaction,
        compact_session,
        context_breakdown,
        projection_messages,
    )
    from refold.compaction.structure import provider_problems, repair_tool_pairs
    from refold.compaction.summarizer import Summarizer, SummaryDraft, SummaryRequest
    from refold.compaction.summary import END_MARKER, PREFIX, SUMMARY_KEY

# name -> submodule that defines it
_LAZY = {
    "BuiltinSummarizer": "refold.compaction.builtin",
    "CompactionReport": "refold.compaction.core",
    "CompactionResult": "refold.compaction.core",
    "compact": "refold.compaction.core",
    "compact_for_overflow": "refold.compaction.engine",
    "complete_with_overflow_recovery": "refold.compaction.engine",
    "CompactionGuard": "refold.compaction.guard",
    "Decision": "refold.compaction.guard",
    "GuardStatus": "refold.compaction.guard",
    "LLMSummarizer": "refold.compaction.llm_summarizer",
    "CompactionPolicy": "refold.compaction.policy",
    "ModelOverride": "refold.compaction.policy",
    "Threshold": "refold.compaction.policy",
    "threshold_for": "refold.compaction.policy",
    "ContextBreakdown": "refold.compaction.session",
    "SessionCompaction": "refold.compaction.session",
    "compact_session": "refold.compaction.session",
    "context_breakdown": "refold.compaction.session",
    "projection_messages": "refold.compaction.session",
    "provider_problems": "refold.compaction.structure",
    "repair_tool_pairs": "refold.compaction.structure",
    "Summarizer": "refold.compaction.summarizer",
    "SummaryDraft": "refold.compaction.summarizer",
    "SummaryRequest": "refold.compaction.summarizer",
    "END_MARKER": "refold.compaction.summary",
    "PREFIX": "refold.compaction.summary",
    "SUMMARY_KEY": "refold.compaction.summary",
}


__getattr__ = lazy_names(__name__, _LAZY, globals())


__all__ = [
    "END_MARKER",
    "PREFIX",
    "SUMMARY_KEY",
    "BuiltinSummarizer",
    "CompactionGuard",
    "CompactionPolicy",
    "CompactionReport",
    "CompactionResult",
    "ContextBreakdown",
    "Decision",
    "GuardStatus",
    "LLMSummarizer",
    "ModelOverride",
    "SessionCompaction",
    "Summarizer",
    "SummaryDraft",
    "SummaryRequest",
    "Threshold",
    "compact",
    "compact_for_overflow",
    "compact_session",
    "complete_with_overflow_recovery",
    "context_breakdown",
    "projection_messages",
    "provider_problems",
    "repair_tool_pairs",
    "threshold_for",
]
