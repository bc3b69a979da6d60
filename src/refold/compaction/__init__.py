"""Layer 1: compaction of one session's context window.

    from refold.compaction import compact, CompactionPolicy
    result = compact(messages, context_length=128_000, model="gpt-4o")
    result.messages, result.report

``compact`` is pure (the summarizer is the only seam that may do I/O); ``CompactionGuard``
decides when to run it; ``compact_session`` applies it to a stored session.
"""

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
