"""Provider context overflow → compact → retry, end to end against the scripted server."""

from __future__ import annotations

import pytest

from refold.errors import ContextOverflowError, UpstreamError
from refold.llm import HttpChatClient
from refold.runtime import Engine
from refold.store import Store
from refold.testing import ScriptedReply, serve

from ._helpers import answer, tool_turn

SYSTEM = "You are a test agent."


def _fill(engine: Engine, turns: int) -> object:
    rt = engine.open_session(new=True)
    for i in range(turns):
        rt.prepare(tool_turn(i, size=200), system_prompt=SYSTEM)
        rt.record(answer(i))
    return rt


def _call_with_recovery(rt, client: HttpChatClient) -> tuple[int, object]:  # type: ignore[no-untyped-def]
    prepared = rt.prepare([{"role": "user", "content": "and now?"}], system_prompt=SYSTEM)
    for attempt in range(8):
        try:
            return attempt, client.complete(prepared.messages, model="m")
        except UpstreamError as exc:
            if not rt.handle_error(exc, attempt):
                raise
            prepared = rt.prepare([], system_prompt=SYSTEM)
    raise AssertionError("retry loop not bounded by handle_error")


def test_overflow_compacts_and_retries(store: Store) -> None:
    with Engine(store, model="gpt-4o-mini", context_length=64_000) as engine:
        rt = _fill(engine, 8)
        with serve(default=lambda _b: ScriptedReply(content="fine"),
                   max_context_tokens=3_000) as llm, HttpChatClient(llm.base_url) as client:
            attempts, result = _call_with_recovery(rt, client)
            assert attempts >= 1
            assert result.message["content"] == "fine"  # type: ignore[attr-defined]
            rejected = [r for r in llm.llm.requests][:attempts]
            assert len(rejected) == attempts
        assert store.list_checkpoints(rt.session_id)
        assert store.get_session(rt.session_id).message_count == 8 * 4 + 1  # nothing lost


def test_overflow_recovery_is_bounded(store: Store) -> None:
    with Engine(store, model="gpt-4o-mini", context_length=64_000) as engine:
        rt = _fill(engine, 4)
        with serve(max_context_tokens=10) as llm, HttpChatClient(llm.base_url) as client:
            with pytest.raises(ContextOverflowError):
                _call_with_recovery(rt, client)
            assert len(llm.llm.requests) <= 5
