"""Conversations big enough to cross a small window, for runtime tests."""

from __future__ import annotations

from typing import Any

WINDOW = 8_000


def tool_turn(i: int, size: int = 400) -> list[dict[str, Any]]:
    """A user ask, a tool call, a large tool result, an assistant answer."""
    log = "\n".join(f"tests/test_mod{i}.py::test_case_{k} FAILED AssertionError: {k} != {k + 1}"
                    for k in range(size // 10))
    return [
        {"role": "user", "content": f"step {i}: please run the tests for module {i}"},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": f"call_{i}", "type": "function",
            "function": {"name": "terminal", "arguments": f'{{"cmd": "pytest -q tests/{i}"}}'}}]},
        {"role": "tool", "tool_call_id": f"call_{i}", "content": log},
    ]


def answer(i: int) -> dict[str, Any]:
    return {"role": "assistant", "content": f"Module {i}: the failures come from off-by-one "
                                            f"errors in src/mod{i}.py; fixed."}
