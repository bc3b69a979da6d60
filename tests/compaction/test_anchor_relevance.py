"""Anchors that matter (issue 13): commands written in prose are recognised; names that only
one tool output printed (an ``ls`` listing) lose to identifiers someone used."""

from __future__ import annotations

import json
from typing import Any

from refold.compaction.anchors import extract_anchors, select_anchors
from refold.tokens import get_counter

COUNTER = get_counter("gpt-4o")


def test_commands_in_prose_are_anchors() -> None:
    msgs: list[dict[str, Any]] = [
        {"role": "assistant", "content": "Let's run the edge case:\n```\npytest tests/test_x.py "
                                         "-k edge\n```"},
        {"role": "user", "content": "Also try `cargo test --release -p core` please."},
    ]
    texts = {a.text for a in extract_anchors(msgs)}
    assert "pytest tests/test_x.py -k edge" in texts
    assert "cargo test --release -p core" in texts


def test_an_unreferenced_listing_loses_to_used_paths() -> None:
    listing = "\n".join(f"file_{i:03d}_{chr(97 + i % 26)}.h" for i in range(60))
    call = {"id": "a", "type": "function",
            "function": {"name": "execute_bash", "arguments": json.dumps({"command": "ls src"})}}
    msgs: list[dict[str, Any]] = [
        {"role": "assistant", "content": "The bug is in src/core/parser.c; see also "
                                         "src/core/lexer.c."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "a", "content": listing},
    ]  # the listing is the most recent: recency alone would rank it first
    chosen = select_anchors(extract_anchors(msgs), budget_tokens=40,
                            count_text=COUNTER.count_text)
    assert "src/core/parser.c" in chosen and "src/core/lexer.c" in chosen, chosen
