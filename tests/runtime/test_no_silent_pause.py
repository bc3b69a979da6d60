"""No silent pause (issue 13 item 5): every compaction that was due and did not happen — a
no-op, the back-off after it, lease contention, an aborted or refused compaction, a summarizer
failure — is said in ``Prepared.warnings`` (the proxy's ``X-Refold-Warnings``)."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from refold.compaction import CompactionPolicy, LLMSummarizer
from refold.llm import HttpChatClient
from refold.runtime import Engine
from refold.runtime.trigger import Trigger
from refold.store import Store
from refold.testing import ScriptedReply, serve

from ._helpers import WINDOW, answer, tool_turn

BIG = "long " * 3000  # one message far over a 1000-token window: nothing to summarize


@pytest.fixture
def small(store: Store) -> Iterator[Engine]:
    with Engine(store, model="gpt-4o-mini", context_length=1000) as engine:
        yield engine


def test_a_noop_compaction_and_the_back_off_after_it_are_reported(small: Engine) -> None:
    rt = small.open_session(new=True)
    first = rt.prepare([{"role": "user", "content": BIG}])
    assert any(w.startswith("compaction skipped: ") and "waits" in w for w in first.warnings), \
        first.warnings
    for text in ("again", "and again"):  # every due turn of the back-off says so
        rt.record({"role": "assistant", "content": "ok"})
        held = rt.prepare([{"role": "user", "content": text}])
        assert held.compaction is None
        assert any("auto-compaction paused for" in w and "nothing to summarize" in w
                   for w in held.warnings), held.warnings


def test_lease_contention_is_reported(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    import refold.runtime.context as context

    monkeypatch.setattr(context, "LEASE_WAIT_SECONDS", 0.2)
    with Engine(store, model="gpt-4o-mini", context_length=WINDOW,
                background_precompact=False) as engine:
        rt = engine.open_session(new=True)
        assert store.acquire_lease(f"compact:{rt.session_id}", "another-compactor", 60)
        warnings: list[str] = []
        for i in range(60):
            prepared = rt.prepare(tool_turn(i, size=100))
            rt.record(answer(i))
            warnings += prepared.warnings
            if any(w.startswith("compaction deferred: ") for w in warnings):
                break
        assert prepared.compaction is None and not store.list_checkpoints(rt.session_id)
        assert any("lease" in w for w in warnings), warnings
        store.release_lease(f"compact:{rt.session_id}", "another-compactor")


def test_an_aborted_compaction_is_reported_and_then_the_pause(store: Store) -> None:
    failure = ScriptedReply(status=401, error={"error": {"message": "bad key"}})
    with serve(default=lambda _b: failure) as llm, HttpChatClient(llm.base_url) as client:
        summarizer = LLMSummarizer(client, model="summary-model", timeout=2)
        with Engine(store, model="gpt-4o-mini", context_length=WINDOW, summarizer=summarizer,
                    background_precompact=False) as engine:
            rt = engine.open_session(new=True)
            warnings: list[str] = []
            for i in range(40):
                warnings += rt.prepare(tool_turn(i, size=100)).warnings
                rt.record(answer(i))
    assert not store.list_checkpoints(rt.session_id)  # an abort keeps the transcript
    aborted = [w for w in warnings if w.startswith("compaction aborted: ")]
    assert aborted and "stored nothing" in aborted[0], warnings
    assert any("auto-compaction paused" in w and "auth" in w for w in warnings), warnings


def _report(status: str, **fields: Any) -> SimpleNamespace:
    defaults: dict[str, Any] = {"reason": "", "error_kind": None, "warnings": [],
                                "fits": True, "summarizer": "builtin"}
    return SimpleNamespace(status=status, **{**defaults, **fields})


def test_a_refused_compaction_is_reported() -> None:
    trigger = Trigger(CompactionPolicy(), context_length=16_000, model="gpt-4o-mini")
    trigger.record(_report("refused", reason="the summary would grow the context"))
    assert trigger.take_warnings() == [
        "compaction refused: the summary would grow the context"]
    trigger.record(_report("summarized"))
    assert trigger.take_warnings() == []  # a compaction that stored something: no warning


def test_a_summarizer_failure_fallback_is_reported(store: Store) -> None:
    failure = ScriptedReply(status=500, error={"error": {"message": "boom"}})
    with serve(default=lambda _b: failure) as llm, HttpChatClient(llm.base_url) as client:
        summarizer = LLMSummarizer(client, model="summary-model", timeout=2)
        with Engine(store, model="gpt-4o-mini", context_length=WINDOW, summarizer=summarizer,
                    background_precompact=False) as engine:
            rt = engine.open_session(new=True)
            warnings: list[str] = []
            for i in range(40):
                prepared = rt.prepare(tool_turn(i, size=100))
                rt.record(answer(i))
                warnings += prepared.warnings
                if prepared.compaction is not None:
                    break
    assert prepared.compaction is not None and prepared.compaction.status == "fallback"
    assert any("summary model is not asked again" in w for w in warnings), warnings
