"""The curated top-level API: every advertised name resolves, unknown names fail clearly."""

from __future__ import annotations

from pathlib import Path

import pytest

import refold


@pytest.mark.parametrize("name", refold.__all__)
def test_every_exported_name_resolves(name: str) -> None:
    assert getattr(refold, name) is not None


def test_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_thing"):
        refold.no_such_thing  # noqa: B018


def test_open_compact_and_engine_work_together(tmp_path: Path) -> None:
    store = refold.open(tmp_path / "refold.db")
    messages = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}]
    result = refold.compact(messages, context_length=128_000)
    assert result.messages[-1] == messages[-1]
    engine = refold.Engine(store, model="gpt-4o", context_length=128_000)
    rt = engine.open_session(new=True)
    prepared = rt.prepare([{"role": "user", "content": "remember the milk"}])
    assert prepared.messages[-1]["content"] == "remember the milk"
    engine.close()
    store.close()
