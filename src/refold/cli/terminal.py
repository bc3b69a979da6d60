"""Text from the ledger on its way to a terminal: control sequences made visible, not obeyed.

A stored message can hold anything a model or a tool printed — ``ESC[2J`` (clear screen),
``ESC]0;…BEL`` (set the window title), carriage returns that overwrite a line, bidi overrides.
Printed raw, the terminal would act on them. ``safe_text`` replaces every C0/C1 control
character but newline and tab (and the Unicode bidi controls) with a visible escape such as
``\\x1b``, so what a person sees is what is stored. JSON output never goes through it: it stays
the stored text exactly (JSON escapes control characters itself).
"""

from __future__ import annotations

import re

_BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_UNSAFE = f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}]"


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def safe_text(text: str) -> str:
    """``text`` with control characters (but newline and tab) shown as escapes."""
    return re.sub(_UNSAFE, _visible, text)  # re's own cache: compiled once, on first use
