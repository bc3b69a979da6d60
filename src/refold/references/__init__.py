"""References in user messages: ``@session``, ``@file``, ``@folder``, ``@diff``, ``@staged``,
``@git`` and ``@url``, expanded into budgeted context blocks.

    expander = local_expander(store=store, cwd=".", spill_dir=home / "spill")
    expansion = expander.expand("why does @file:app.py:10-40 fail?", context_length=128_000)
    expansion.message, expansion.warnings

Parsing is pure (``parse_references``); reading goes through small seams (``FileReader``,
``GitRunner``, an optional URL fetcher); the path guard and the budgets are in
``refold.references.paths`` and ``refold.references.budget``.
"""

from refold.references.expand import (
    ATTACHED_HEADER,
    Attached,
    Expansion,
    ReferenceExpander,
    expand_message,
    local_expander,
)
from refold.references.parse import Reference, parse_references
from refold.references.paths import PathGuard, PathRefused
from refold.references.sessions import SessionReferences
from refold.references.spill import SpillPage, SpillStore

__all__ = [
    "ATTACHED_HEADER",
    "Attached",
    "Expansion",
    "PathGuard",
    "PathRefused",
    "Reference",
    "ReferenceExpander",
    "SessionReferences",
    "SpillPage",
    "SpillStore",
    "expand_message",
    "local_expander",
    "parse_references",
]
