"""The one error tree of refold.

Every error refold raises on purpose is a ``RefoldError``; foreign errors (sqlite3, psycopg,
httpx, OSError) are translated into one of these at the boundary that meets them, so callers
catch one family and the CLI and the server each render it in exactly one place.

    RefoldError                      base; ``str(err)`` is a one-line, user-facing message
    ├── InvalidInput                 the caller gave something malformed (exit 2 in the CLI)
    │   ├── MessageValidationError   a message breaks the chat format (index + field + problem)
    │   └── SearchQueryError         a search query could not be made safe
    ├── NotFound                     a session, message, checkpoint or memory entry is missing
    │   └── AmbiguousReference       a prefix or substring matched several things
    ├── Conflict                     state changed underneath (lease held, drifted file, stale write)
    ├── StorageError                 the database or filesystem failed (translated driver errors)
    │   └── MigrationError           the schema could not be brought up to date
    ├── MemoryError_                 a memory write was refused (limit, injection scan, approval)
    ├── CompactionError              compaction could not produce a valid, smaller context
    │   └── SummarizerError          a summarizer failed; ``retryable`` says whether to fall back
    ├── BudgetExceeded               a session reached its cost budget (budget_action = refuse)
    └── UpstreamError                an LLM endpoint failed; ``kind`` classifies it
        └── ContextOverflowError     the provider said the prompt is too long

``hint`` is an optional sentence telling the user what to do next.
"""

from __future__ import annotations

from typing import Any


class RefoldError(Exception):
    """Base of every error refold raises deliberately."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.details = details

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message} ({self.hint})"


class InvalidInput(RefoldError):
    """Malformed input from a user or caller."""

    exit_code = 2


class NotActive(InvalidInput):
    """The message a rewind or fork was to start at is not (or no longer) an active row: a
    user's wrong seq, or, for the proxy, another writer that rewound it a moment ago (then a
    409 the client may retry, and the runtime places the history again)."""


class MessageValidationError(InvalidInput):
    """A message breaks the chat-completions format."""

    def __init__(self, message: str, *, index: int | None = None, field: str | None = None,
                 hint: str | None = None) -> None:
        where = []
        if index is not None:
            where.append(f"message {index}")
        if field:
            where.append(f"field '{field}'")
        prefix = (", ".join(where) + ": ") if where else ""
        super().__init__(prefix + message, hint=hint, index=index, field=field)
        self.index = index
        self.field = field


class SearchQueryError(InvalidInput):
    """A search query is empty or could not be sanitized."""


class MissingExtra(InvalidInput):
    """An optional feature whose extra is not installed (the message names the extra)."""


class NotFound(RefoldError):
    """Something that was asked for does not exist."""


class AmbiguousReference(NotFound):
    """A reference (id prefix, title, substring) matched more than one thing."""

    def __init__(self, message: str, *, candidates: list[str] | None = None,
                 hint: str | None = None) -> None:
        super().__init__(message, hint=hint, candidates=candidates or [])
        self.candidates = candidates or []


class Conflict(RefoldError):
    """State changed underneath the caller: a held lease, a drifted file, a stale write."""


class StorageError(RefoldError):
    """The database or the filesystem failed."""


class WouldBlock(StorageError):
    """Inside ``nonblocking()``: the store would have had to wait (its lock is held, another
    process is writing). Internal: the caller retries the same call in a worker thread."""


class MigrationError(StorageError):
    """The schema could not be brought up to date."""


class MemoryError_(RefoldError):  # noqa: N801 - avoid shadowing the builtin MemoryError
    """A memory write was refused."""


class CompactionError(RefoldError):
    """Compaction could not produce a valid, smaller context."""


class SummarizerError(CompactionError):
    """A summarizer failed.

    ``retryable`` True means the deterministic fallback may be used (timeouts, 5xx, 429,
    garbage); False means abort and keep the transcript (auth, quota, network, truncation).
    """

    def __init__(self, message: str, *, retryable: bool, kind: str = "error",
                 hint: str | None = None) -> None:
        super().__init__(message, hint=hint, retryable=retryable, kind=kind)
        self.retryable = retryable
        self.kind = kind


class BudgetExceeded(RefoldError):
    """A session's cost reached ``session_budget_usd`` and ``budget_action`` is refuse."""


class UpstreamError(RefoldError):
    """An LLM endpoint failed.

    ``kind`` is one of: "overflow", "auth", "quota", "rate_limit", "timeout", "network",
    "server", "bad_request", "bad_response".
    """

    def __init__(self, message: str, *, kind: str, status: int | None = None,
                 hint: str | None = None, body: Any = None) -> None:
        super().__init__(message, hint=hint, kind=kind, status=status)
        self.kind = kind
        self.status = status
        self.body = body
        # response headers worth passing on (the proxy: Retry-After, x-ratelimit-*)
        self.headers: dict[str, str] = {}


class ContextOverflowError(UpstreamError):
    """The provider rejected the prompt as too long for the model's window."""

    def __init__(self, message: str, *, status: int | None = None, body: Any = None) -> None:
        super().__init__(message, kind="overflow", status=status, body=body,
                         hint="compact the session and retry")
