"""LLM endpoints: the ``ChatClient`` seam, an OpenAI-compatible httpx client, failure classes."""

from refold.llm.client import ChatClient, ChatResult, HttpChatClient, parse_completion
from refold.llm.failures import (
    UPSTREAM_KINDS,
    classify_http_error,
    classify_transport_error,
    error_detail,
)

__all__ = ["UPSTREAM_KINDS", "ChatClient", "ChatResult", "HttpChatClient",
           "classify_http_error", "classify_transport_error", "error_detail", "parse_completion"]
