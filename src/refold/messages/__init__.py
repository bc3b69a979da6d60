"""Messages: the canonical OpenAI chat form, validation, repair and format conversion."""

from refold.messages.model import (
    ROLES,
    ChatMessage,
    Message,
    ToolCall,
    canonical_json,
    chain_identities,
    content_text,
    message_identity,
    searchable_text,
    tool_call_ids,
    wire_form,
)

__all__ = [
    "ROLES",
    "ChatMessage",
    "Message",
    "ToolCall",
    "canonical_json",
    "chain_identities",
    "content_text",
    "message_identity",
    "searchable_text",
    "tool_call_ids",
    "wire_form",
]
