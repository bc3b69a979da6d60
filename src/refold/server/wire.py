"""OpenAI-shaped error bodies and the one mapping from refold errors to HTTP statuses.

Every error the proxy returns, whatever raised it, has the body an OpenAI SDK understands::

    {"error": {"message": "...", "type": "...", "code": "..."}}

Upstream failures keep the classification ``refold.llm`` gave them (``UpstreamError.kind``) and
map to a status that tells the *client* what to do: a bad request or an overflow that compaction
could not fix is the client's (400), a rate limit or quota is 429, an overloaded upstream (529)
is 503, and anything else that is the proxy's or the upstream's fault (credentials refold
holds, network, 5xx, garbage) is a 502/504 — never a 401, which a client would read as "your
key is wrong".
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from typing import Any, NotRequired, TypedDict

from refold.errors import (
    BudgetExceeded,
    CompactionError,
    Conflict,
    ContextOverflowError,
    InvalidInput,
    NotActive,
    NotFound,
    RefoldError,
    StorageError,
    SummarizerError,
    UpstreamError,
)

log = logging.getLogger(__name__)


class ErrorDetail(TypedDict):
    message: str
    type: str
    code: str | None
    param: NotRequired[str]


# an upstream's 4xx that is the request's own fault and keeps its status through the proxy
_CLIENT_STATUSES = frozenset({404, 409, 415, 422})


class ErrorBody(TypedDict):
    error: ErrorDetail


# kind -> (status, OpenAI error type)
_UPSTREAM_STATUS: dict[str, tuple[int, str]] = {
    "overflow": (400, "invalid_request_error"),
    "bad_request": (400, "invalid_request_error"),
    "rate_limit": (429, "rate_limit_error"),
    "quota": (429, "insufficient_quota"),
    "auth": (502, "upstream_error"),
    "timeout": (504, "upstream_error"),
    "network": (502, "upstream_error"),
    "server": (502, "upstream_error"),
    "bad_response": (502, "upstream_error"),
}


def error_body(message: str, type_: str, code: str | None = None) -> ErrorBody:
    return {"error": {"message": message, "type": type_, "code": code}}


def error_bytes(message: str, type_: str, code: str | None = None) -> bytes:
    return json.dumps(error_body(message, type_, code), ensure_ascii=False).encode()


OVERLOADED = "upstream_overloaded"  # the code of an upstream's 529 (Anthropic's "overloaded")


def upstream_status(err: UpstreamError) -> tuple[int, ErrorBody]:
    """Status and body for an upstream failure the proxy could not recover from. An upstream
    that says it is overloaded (529, Anthropic's ``overloaded_error``) is a 503 — the service
    is unavailable for now, retry later — with code ``upstream_overloaded`` (the Messages
    endpoint answers it as Anthropic does: 529, ``overloaded_error``)."""
    if err.kind == "server" and err.status == 529:
        return 503, error_body(str(err), "upstream_error", OVERLOADED)
    status, type_ = _UPSTREAM_STATUS.get(err.kind, (502, "upstream_error"))
    detail = err.body.get("error") if isinstance(err.body, dict) else None
    detail = detail if isinstance(detail, dict) else {}
    if isinstance(err, ContextOverflowError):
        code = "context_length_exceeded"
    elif err.kind == "bad_request" and isinstance(detail.get("code"), str) and detail["code"]:
        code = detail["code"]  # the upstream's own ("model_not_found", "unsupported_parameter")
    else:
        code = f"upstream_{err.kind}"
    if err.kind == "bad_request" and err.status in _CLIENT_STATUSES:
        # the request's own fault, as the upstream said it: a client's SDK raises the error it
        # would have raised talking to it directly (NotFoundError for an unknown model; a
        # fallback to another model catches that, and caught nothing from a 400)
        status = err.status
    message = str(err)
    if err.kind == "auth":
        message = f"{err.message} (the upstream rejected refold's credentials: check " \
                  "REFOLD_UPSTREAM_API_KEY on the proxy)"
    body = error_body(message, type_, code)
    if isinstance(detail.get("param"), str):
        body["error"]["param"] = detail["param"]  # which field, when the upstream said
    return status, body


def status_for(err: RefoldError) -> tuple[int, ErrorBody]:
    """The HTTP status and OpenAI-shaped body for any ``RefoldError``."""
    if isinstance(err, UpstreamError):
        return upstream_status(err)
    if isinstance(err, BudgetExceeded):  # 402: SDKs do not retry it (they retry 429)
        return 402, error_body(str(err), "insufficient_quota", "session_budget_exceeded")
    if isinstance(err, SummarizerError):
        return 502, error_body(f"refold could not summarize the history: {err}",
                               "upstream_error", "summarizer_failed")
    if isinstance(err, CompactionError):  # the history cannot be made to fit the window
        return 400, error_body(str(err), "invalid_request_error", "context_length_exceeded")
    if isinstance(err, NotActive):  # another writer rewound the row a moment ago: retry
        return 409, error_body(f"{err} (another request changed this conversation at the same "
                               "moment; send the request again)", "conflict_error", "conflict")
    if isinstance(err, InvalidInput):
        return 400, error_body(str(err), "invalid_request_error", "invalid_input")
    if isinstance(err, NotFound):
        return 404, error_body(str(err), "not_found_error", "not_found")
    if isinstance(err, Conflict):
        return 409, error_body(str(err), "conflict_error", "conflict")
    if isinstance(err, StorageError):
        log.error("storage failure: %s", err)
        return 500, error_body(f"refold storage failed: {err}", "server_error", "storage_error")
    return 500, error_body(str(err), "server_error", type(err).__name__.lower())


def error_headers(err: RefoldError) -> dict[str, str]:
    """Response headers an error carries to the client: an upstream failure's rate-limit
    headers (``Retry-After``, ``x-ratelimit-*``), so a client paces itself as it would talking
    to the upstream directly."""
    return dict(err.headers) if isinstance(err, UpstreamError) else {}


def sse_error(status: int, body: ErrorBody) -> bytes:
    """An error delivered inside an already-started SSE stream (the status line is gone)."""
    payload: dict[str, Any] = {"error": dict(body["error"], status=status)}
    return b"data: " + json.dumps(payload, ensure_ascii=False).encode() + b"\n\n"


def chat_functions(tools: Any, convert: Callable[[Any], dict[str, Any] | None]
                   ) -> list[dict[str, Any]] | None:
    """A wire format's ``tools`` as chat-completions function tools: None stays None, anything
    but a list is InvalidInput, and ``convert(tool)`` gives each one's function (None: it has
    none, e.g. a server tool; it raises InvalidInput for a tool it refuses)."""
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise InvalidInput("tools must be a list")
    functions = (convert(tool) for tool in tools)
    return [{"type": "function", "function": f} for f in functions if f is not None]


def check_sampling(raw: dict[str, Any]) -> None:
    """InvalidInput for a ``stream`` that is not a boolean (``"yes"`` or ``1`` started a
    stream) or a ``temperature``/``top_p`` that is not a number (``/v1/messages`` and
    ``/v1/responses``; chat completions checks its own)."""
    stream = raw.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise InvalidInput("'stream' must be true or false")
    for key in ("temperature", "top_p"):
        value = raw.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise InvalidInput(f"'{key}' must be a number")


def check_sendable(messages: list[Any]) -> None:
    """InvalidInput for a request whose messages are nothing but tool results (and system
    messages): every result answers no call of an earlier assistant message, so none can go
    upstream (the turn drops orphan results, ``refold.runtime.valid``) and nothing would be
    left to send — where before the client's orphan results went upstream as they were, and a
    real provider answered 400. Usually returns at the first user or assistant message."""
    results = False
    for message in messages:
        role = message.get("role") if isinstance(message, dict) else None
        if role == "tool":
            results = True
        elif role not in ("system", "developer"):
            return
    if results:
        raise InvalidInput(
            "the request holds no message to send: its tool results answer no tool call of an "
            "earlier assistant message in the request, and such orphan results are dropped",
            hint="send the assistant message with the tool calls before their results")


# OpenAI's reasoning models (o1, o3, o4-mini, the gpt-5 family) refuse ``max_tokens`` ("not
# supported with this model, use max_completion_tokens"); other chat servers (vLLM, Ollama,
# LiteLLM, DeepSeek) read ``max_tokens``, and some not the newer name
_COMPLETION_TOKENS_MODELS = re.compile(r"^(?:[\w.-]+/)?(?:o\d|gpt-5)", re.IGNORECASE)


def output_limit(model: Any, tokens: Any) -> dict[str, Any]:
    """The chat body's output limit for a translated request (an Anthropic ``max_tokens``, a
    Responses ``max_output_tokens``): ``max_completion_tokens`` for a model that refuses the
    older name, else ``max_tokens``. Every request to gpt-5 through /v1/messages was a 400."""
    key = "max_completion_tokens" if isinstance(model, str) and \
        _COMPLETION_TOKENS_MODELS.match(model) else "max_tokens"
    return {key: tokens}
