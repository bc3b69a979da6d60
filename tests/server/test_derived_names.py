"""``derived_ref`` remembers the names of short first messages: the same name as computing it
again, whatever the first user message is (text short or long, parts, a lone surrogate)."""

from __future__ import annotations

from typing import Any

import pytest

from refold.server.sessions import _REMEMBERED_CHARS, _digest, derived_ref


@pytest.mark.parametrize("content", [
    "hello", "x" * _REMEMBERED_CHARS, "x" * (_REMEMBERED_CHARS + 1), "lone \ud800 surrogate",
    "部署 计划", [{"type": "text", "text": "parts"}], None, ""])
def test_a_remembered_name_is_the_computed_one(content: Any) -> None:
    history = [{"role": "system", "content": "s"}, {"role": "user", "content": content}]
    for owner in ("", "tenant"):
        expected = _digest([owner, content])
        assert derived_ref(owner, history) == expected
        assert derived_ref(owner, history) == expected  # the second time, remembered
    assert derived_ref("", [{"role": "system", "content": "s"}]) == _digest(["", None])
