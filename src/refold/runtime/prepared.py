"""What ``prepare`` hands the caller, and how a provider error maps to "retry on a smaller context".

``Prepared`` is a frozen value: the exact message list to send (system prompt with the frozen
memory snapshot, the checkpoint summary, the kept tail and the new messages), its token count and
the budget it was measured against. ``classify_error`` reuses ``refold.llm``'s classification so
"what kind of failure was it" has one answer across refold.
"""

from __future__ import annotations

from typing import Any, Literal

from refold._records import dataclass, field
from refold.errors import UpstreamError
from refold.messages.model import Message

ErrorAction = Literal["compact_and_retry", "retry_later", "fail"]

# Kinds the caller can fix by sending a smaller context.
COMPACTABLE_KINDS = frozenset({"overflow"})
# Kinds worth retrying unchanged after a pause (the runtime does not retry them itself).
TRANSIENT_KINDS = frozenset({"rate_limit", "timeout", "network", "server"})


@dataclass(frozen=True)
class Prepared:
    """The request body's ``messages`` for one model call, with its measured size."""

    messages: list[Message]  # wire form (no in-process "_" keys), fresh dicts the caller owns
    tokens: int
    threshold: int
    context_length: int
    # the refold.compaction report when this call compacted (a plan pre-built in the
    # background carries the figures from when it was computed; tokens_before is this call's)
    compaction: Any | None = None
    warnings: list[str] = field(default_factory=list)
    tokens_before: int | None = None  # the size before this call compacted (None: it didn't)

    @property
    def fraction(self) -> float:
        """How full the trigger budget is (1.0 = at the compaction threshold)."""
        return self.tokens / self.threshold if self.threshold else 0.0


def classify_error(error: BaseException | int, body_text: str = "") -> str:
    """The ``UpstreamError.kind`` of an exception or of an HTTP status (+ body).

    Non-refold exceptions are "network" when they look like transport failures, else
    "bad_response"; statuses go through ``refold.llm.classify_http_error``.
    """
    if isinstance(error, UpstreamError):
        return error.kind
    if isinstance(error, int):
        from refold.llm import classify_http_error

        return classify_http_error(error, body_text).kind
    import httpx

    if isinstance(error, httpx.HTTPError):
        from refold.llm import classify_transport_error

        return classify_transport_error(error).kind
    return "bad_response"


def error_action(kind: str) -> ErrorAction:
    """What a caller should do about a failure of ``kind``."""
    if kind in COMPACTABLE_KINDS:
        return "compact_and_retry"
    if kind in TRANSIENT_KINDS:
        return "retry_later"
    return "fail"
