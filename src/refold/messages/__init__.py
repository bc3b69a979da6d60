"""Messages: the canonical OpenAI chat form, validation, repair and format conversion.

The names load on first use (PEP 562): the store needs only ``refold.messages.model``, and
``refold search`` should not pay for the converters and loaders.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from refold._lazy import lazy_names

# eager: the function ``repair`` shares its name with its module, which would shadow a lazy name
from refold.messages.repair import MISSING_RESULT, RepairChange, RepairResult, repair

if TYPE_CHECKING:
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
    from refold.messages.validate import (
        invalid_tool_arguments,
        repair_text,
        validate_message,
        validate_messages,
    )

# name -> submodule that defines it
_LAZY = {
    "from_anthropic": "refold.messages.anthropic",
    "to_anthropic": "refold.messages.anthropic",
    "load_anthropic": "refold.messages.load",
    "load_messages": "refold.messages.load",
    "load_messages_file": "refold.messages.load",
    "ROLES": "refold.messages.model",
    "ChatMessage": "refold.messages.model",
    "Message": "refold.messages.model",
    "ToolCall": "refold.messages.model",
    "canonical_json": "refold.messages.model",
    "chain_identities": "refold.messages.model",
    "content_text": "refold.messages.model",
    "message_identity": "refold.messages.model",
    "searchable_text": "refold.messages.model",
    "tool_call_ids": "refold.messages.model",
    "wire_form": "refold.messages.model",
    "invalid_tool_arguments": "refold.messages.validate",
    "repair_text": "refold.messages.validate",
    "validate_message": "refold.messages.validate",
    "validate_messages": "refold.messages.validate",
}


__getattr__ = lazy_names(__name__, _LAZY, globals())


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
