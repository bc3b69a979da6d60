"""Token budgets for attached text: count, and cut a text to fit.

``cut_to`` keeps the head of a text (files and diffs are read top-down) and says how much it
dropped; it never returns more tokens than asked for.
"""

from __future__ import annotations

from collections.abc import Callable

from refold.tokens.estimate import estimate_tokens

CountFn = Callable[[str], int]

SESSION_SHARE = 0.20  # DeepSeek Harness: referenced sessions get 20% of the window
ATTACH_SOFT_SHARE = 0.25  # Hermes: a warning above 25% of the window
ATTACH_HARD_SHARE = 0.50  # Hermes: never more than 50% of the window


def default_count(text: str) -> int:
    return estimate_tokens(text)


def cut_to(text: str, budget: int, count: CountFn = default_count, *,
           total: int | None = None) -> tuple[str, bool]:
    """``text`` if it fits in ``budget`` tokens, else its longest head (at a line end when one
    is near) that does — and True. ``total``: ``count(text)`` when the caller has it."""
    if budget <= 0:
        return "", bool(text)
    total = count(text) if total is None else total
    if total <= budget:
        return text, False
    size = max(1, int(len(text) * budget / total))
    while size > 0:
        head = text[:size]
        newline = head.rfind("\n")
        if newline > size * 0.8:
            head = head[:newline]
        if count(head) <= budget:
            return head, True
        size = int(size * 0.85)
    return "", True


__all__ = ["ATTACH_HARD_SHARE", "ATTACH_SOFT_SHARE", "SESSION_SHARE", "CountFn", "cut_to",
           "default_count"]
