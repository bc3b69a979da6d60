"""The one place an LLM endpoint's failure becomes a ``refold.errors.UpstreamError``.

Every caller that talks to a provider (the chat client, the llm summarizer, the proxy while
streaming) classifies failures here, so "what kind of failure was it" has one answer:

    overflow     400/413 saying the prompt is too long, code ``context_length_exceeded``,
                 long-context-tier refusals (raised as ``ContextOverflowError``)
    auth         401, 403
    quota        402, or any body saying ``insufficient_quota`` / billing
    rate_limit   429
    timeout      the request timed out (also 408)
    network      the connection could not be made or was lost
    server       5xx
    bad_request  any other 4xx
    bad_response 2xx whose body is not a usable completion (garbage JSON, no choices, empty)

The message never contains request content or API keys: only the status and the provider's
own error message (truncated).
"""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any

import httpx

from refold.errors import ContextOverflowError, UpstreamError

UPSTREAM_KINDS = ("overflow", "auth", "quota", "rate_limit", "timeout", "network", "server",
                  "bad_request", "bad_response")

# Wording providers use for "prompt too long" (OpenAI, Anthropic, vLLM, llama.cpp, Ollama,
# OpenRouter, Gemini); matched case-insensitively against the error body.
_OVERFLOW_PATTERNS = re.compile(
    r"context[_ ]length|context window|maximum context|max_tokens.*context|"
    r"prompt is too long|input is too long|too many tokens|reduce the length|"
    r"exceeds? (?:the )?(?:model'?s? )?(?:maximum )?(?:context|token limit|input)|"
    r"input tokens? exceed|prompt too long|request too large|long[- ]context",
    re.IGNORECASE)
_TIER_PATTERNS = re.compile(r"long[- ]context|context_length_exceeded", re.IGNORECASE)
_QUOTA_PATTERNS = re.compile(r"insufficient_quota|exceeded your current quota|billing|"
                             r"credit balance|payment required|out of credits", re.IGNORECASE)
_MAX_DETAIL = 300


def error_detail(body_text: str) -> str:
    """The provider's own error message from a body (JSON ``error.message`` or raw text)."""
    text = (body_text or "").strip()
    try:
        data: Any = json.loads(text)
    except ValueError:
        return text[:_MAX_DETAIL]
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict):
            message = err.get("message") or err.get("detail") or err.get("code")
            if message:
                return str(message)[:_MAX_DETAIL]
        elif isinstance(err, str):
            return err[:_MAX_DETAIL]
    return text[:_MAX_DETAIL]


def _body_json(body_text: str) -> Any:
    try:
        return json.loads(body_text)
    except ValueError:
        return body_text


def classify_http_error(status: int, body_text: str) -> UpstreamError:
    """Turn a non-2xx response (status and body text) into the matching ``UpstreamError``."""
    detail = error_detail(body_text)
    lowered = (body_text or "").lower()
    body = _body_json(body_text)
    message = f"upstream returned HTTP {status}: {detail}" if detail else \
        f"upstream returned HTTP {status}"
    if status in (400, 422) and (
            "context_length_exceeded" in lowered or _OVERFLOW_PATTERNS.search(body_text or "")):
        return ContextOverflowError(message, status=status, body=body)
    # a 429 is an overflow only when it is the long-context tier, not a plain rate limit
    if status == 413 or (status == 429 and _TIER_PATTERNS.search(body_text or "")):
        return ContextOverflowError(message, status=status, body=body)
    if status == 402 or _QUOTA_PATTERNS.search(body_text or ""):
        return UpstreamError(message, kind="quota", status=status, body=body,
                             hint="check the provider account's quota or billing")
    if status in (401, 403):
        return UpstreamError(message, kind="auth", status=status, body=body,
                             hint="check the API key")
    if status == 429:
        return UpstreamError(message, kind="rate_limit", status=status, body=body,
                             hint="retry later")
    if status == 408:
        return UpstreamError(message, kind="timeout", status=status, body=body)
    if status >= 500:
        return UpstreamError(message, kind="server", status=status, body=body)
    return UpstreamError(message, kind="bad_request", status=status, body=body)


def response_error(status: int, body_text: str, headers: Any) -> UpstreamError:
    """``classify_http_error`` with the response's ``Retry-After`` / ``retry-after-ms``: kept
    on the error (``headers``) and, on a rate limit, said in its hint — "retry later" left a
    person at ``refold chat`` to guess the wait the upstream had named."""
    error = classify_http_error(status, body_text)
    kept = {name: str(headers[name]) for name in ("retry-after", "retry-after-ms")
            if headers.get(name)}
    error.headers.update(kept)
    wait = _retry_seconds(kept)
    if error.kind == "rate_limit" and wait is not None:
        error.hint = f"the upstream asks to retry in {wait} s"
    return error


def _retry_seconds(headers: dict[str, str]) -> str | None:
    """Seconds to wait, from ``retry-after-ms`` or a numeric ``Retry-After`` (an HTTP date is
    left to the headers)."""
    with contextlib.suppress(ValueError):
        if "retry-after-ms" in headers:
            return f"{float(headers['retry-after-ms']) / 1000:g}"
    with contextlib.suppress(ValueError):
        if "retry-after" in headers:
            return f"{float(headers['retry-after']):g}"
    return None


def classify_transport_error(exc: httpx.HTTPError, url: str = "") -> UpstreamError:
    """Turn an httpx transport exception (no HTTP response) into an ``UpstreamError``."""
    if isinstance(exc, httpx.TimeoutException):
        return transport_failure("timeout", exc.__class__.__name__, url)
    return transport_failure("network", f"{exc.__class__.__name__}: {exc}", url)


def transport_failure(kind: str, detail: str, url: str = "") -> UpstreamError:
    """A failure with no HTTP response: ``kind`` "timeout", else a network failure."""
    where = f" ({url})" if url else ""
    if kind == "timeout":
        return UpstreamError(f"upstream timed out{where}: {detail}", kind="timeout")
    return UpstreamError(f"cannot reach upstream{where}: {detail}", kind="network",
                         hint="check the base URL and the network")


def bad_response(reason: str, status: int | None = 200) -> UpstreamError:
    """A 2xx reply that is not a usable completion."""
    return UpstreamError(f"upstream sent an unusable reply: {reason}", kind="bad_response",
                         status=status)
