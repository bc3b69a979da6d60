"""Messages: the canonical OpenAI chat form, validation, repair and format conversion."""

from refold.messages.anthropic import from_anthropic, to_anthropic
from refold.messages.load import load_anthropic, load_messages, load_messages_file
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
from refold.messages.repair import MISSING_RESULT, RepairChange, RepairResult, repair
from refold.messages.validate import (
    invalid_tool_arguments,
    repair_text,
    validate_message,
    validate_messages,
)

__all__ = [
    "MISSING_RESULT",
    "ROLES",
    "ChatMessage",
    "Message",
    "RepairChange",
    "RepairResult",
    "ToolCall",
    "canonical_json",
    "chain_identities",
    "content_text",
    "from_anthropic",
    "invalid_tool_arguments",
    "load_anthropic",
    "load_messages",
    "load_messages_file",
    "message_identity",
    "repair",
    "repair_text",
    "searchable_text",
    "to_anthropic",
    "tool_call_ids",
    "validate_message",
    "validate_messages",
    "wire_form",
]
