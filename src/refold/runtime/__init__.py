"""The session runtime: what an agent calls around every model call.

    engine = Engine(store, model="gpt-4o-mini", context_length=128_000, memory_dir=home / "memories")
    rt = engine.open_session(new=True, title="fix the tests")
    prepared = rt.prepare([{"role": "user", "content": "hi"}], system_prompt="You are …")
    reply = client.complete(prepared.messages, model=...)      # your model call
    rt.record(reply.message, usage=reply.usage)
    engine.close()

On a provider error: ``if rt.handle_error(err, attempt): prepared = rt.prepare([])`` and retry.
A proxy that receives the whole history each call uses ``rt.prepare_history(history)`` instead.

``build_summarizer("llm", model=..., client=..., summarizer_model=...)`` makes the summarizer a
surface configured (pass it as ``Engine(summarizer=...)``); ``rt.close()`` ends a session for the
memory providers (``Engine.close`` does it for runtimes still open).
"""

from refold.runtime.engine import Engine
from refold.runtime.precompact import Plan, Precompactor
from refold.runtime.prepared import (
    COMPACTABLE_KINDS,
    TRANSIENT_KINDS,
    Prepared,
    classify_error,
    error_action,
)
from refold.runtime.session import SessionRuntime, split_system
from refold.runtime.summarizers import SUMMARIZER_KINDS, build_summarizer

__all__ = [
    "COMPACTABLE_KINDS",
    "SUMMARIZER_KINDS",
    "TRANSIENT_KINDS",
    "Engine",
    "Plan",
    "Precompactor",
    "Prepared",
    "SessionRuntime",
    "build_summarizer",
    "classify_error",
    "error_action",
    "split_system",
]
