"""``abort_on_summary_failure``: a failed LLM summary aborts, and no builtin summary stands in
during the cooldown that follows. It stood in on the very next turn, right after a warning
that said the transcript was kept as it was."""

from __future__ import annotations

from refold.compaction.llm_summarizer import LLMSummarizer
from refold.llm import HttpChatClient
from refold.runtime.engine import Engine
from refold.store import Store
from refold.testing import ScriptedReply, serve


def test_no_builtin_summary_stands_in_when_failures_abort(sqlite_store: Store) -> None:
    with serve(default=lambda body: "reply") as up, HttpChatClient(up.base_url) as client:
        up.llm.push(ScriptedReply(status=500), ScriptedReply(status=500))
        summarizer = LLMSummarizer(client, "aux", main_model="main", abort_on_failure=True)
        engine = Engine(sqlite_store, model="gpt-4o-mini", context_length=8000,
                        summarizer=summarizer, background_precompact=False)
        rt = engine.open_session(new=True)
        history: list[dict[str, str]] = []
        said: list[str] = []
        for i in range(18):
            history.append({"role": "user", "content": f"turn {i} " + "word " * 300})
            prepared = rt.prepare_history(list(history))
            said += prepared.warnings
            assert len(prepared.warnings) == len(set(prepared.warnings))
            history.append({"role": "assistant", "content": f"answer {i}"})
            rt.record(history[-1], usage={"prompt_tokens": prepared.tokens,
                                          "completion_tokens": 5})
        engine.close()
    assert sqlite_store.list_checkpoints(rt.session_id) == []
    assert any(w.startswith("compaction aborted") and "stored nothing" in w for w in said)
    assert any("keeps the builtin summarizer from standing in" in w for w in said)
    assert not any("kept as it is; auto-compaction" in w for w in said)
