"""The ``expand_references`` tool: what refold would attach for a message's ``@`` references.

For agents that reach refold only as tools (``refold mcp``): the model or its host passes a
message with ``@session:REF``, ``@file:PATH``, ``@folder:DIR``, ``@diff``, ``@staged`` or
``@git:REV`` and gets back the expanded message plus every refusal and cut as a warning — the
same resolvers, budgets and deny-list as ``prepare()`` and ``refold expand``. Nothing is stored.
"""

from __future__ import annotations

from typing import Any

from refold.errors import InvalidInput
from refold.references.expand import ReferenceExpander
from refold.tools.registry import Tool, to_json

NAME = "expand_references"
MAX_TEXT = 100_000

DESCRIPTION = (
    "Expand the @references in a message: @session:REF (what a past session established, "
    "within a budget; the rest is spilled and can be paged with session_search mode=spill), "
    "@file:PATH or @file:PATH:L1-L2, @folder:DIR, @diff, @staged and @git:REV (read from the "
    "server's working directory; sensitive files and paths outside it are refused). Returns "
    "the expanded message, what was attached and every warning (refused or cut, and why).")

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "text": {"type": "string", "description": "The message with @references."},
        "context_length": {"type": "integer", "minimum": 1,
                           "description": "The window the budgets are shares of "
                                          "(default: the configured context_length)."},
    },
    "required": ["text"],
    "additionalProperties": False,
}


def expand_tool(expander: ReferenceExpander, *, context_length: int) -> Tool:
    """The tool over ``expander``; budgets are shares of ``context_length`` unless a call
    names another window."""

    def handle(args: dict[str, Any]) -> str:
        text = args.get("text")
        if not isinstance(text, str) or not text.strip():
            raise InvalidInput("`text` must be a non-empty string: the message to expand")
        if len(text) > MAX_TEXT:
            raise InvalidInput(f"`text` is {len(text)} characters; at most {MAX_TEXT}")
        window = args.get("context_length", context_length)
        if type(window) is not int or window < 1:
            raise InvalidInput("`context_length` must be a positive integer (tokens)")
        return to_json(expander.expand(text, context_length=window).to_dict())

    return Tool(NAME, DESCRIPTION, PARAMETERS, handle)
