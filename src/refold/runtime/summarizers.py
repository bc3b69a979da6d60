"""``build_summarizer``: the one place a summarizer choice becomes a ``Summarizer`` object.

The library reads no settings and no environment: a surface (``refold serve``, ``refold chat``,
``refold compact``) turns its settings into these explicit arguments, and every surface gets the
same summarizer for the same choice.

- ``"builtin"``: the deterministic ``BuiltinSummarizer`` (no I/O, byte-stable output);
- ``"llm"``: ``LLMSummarizer`` over ``client`` asking ``summarizer_model`` (default: ``model``),
  falling back once to the main ``model`` (over ``main_client`` when the summary endpoint is
  not the main one). Its failures fall back to the builtin summarizer inside ``compact`` and
  start the guard's cooldown in the runtime.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from refold.errors import InvalidInput

if TYPE_CHECKING:
    from refold.compaction.summarizer import Summarizer
    from refold.llm import ChatClient

SUMMARIZER_KINDS = ("builtin", "llm")


def build_summarizer(kind: str = "builtin", *, model: str, client: ChatClient | None = None,
                     summarizer_model: str | None = None, main_client: ChatClient | None = None,
                     timeout: float = 120.0, cache_friendly: bool = False,
                     abort_on_failure: bool = False,
                     context_length: int | None = None) -> Summarizer:
    """The summarizer for ``kind`` ("builtin" | "llm"); "llm" needs a ``client``;
    ``context_length``, the summary model's window when known, bounds what it is sent."""
    from refold.compaction import BuiltinSummarizer, LLMSummarizer

    if kind == "builtin":
        return BuiltinSummarizer()
    if kind != "llm":
        raise InvalidInput(f"unknown summarizer {kind!r}", hint="use builtin or llm")
    if client is None:
        raise InvalidInput("the llm summarizer needs an endpoint",
                           hint="set summarizer_url or upstream (an OpenAI-compatible …/v1 URL)")
    return LLMSummarizer(client, summarizer_model or model, main_client=main_client,
                         main_model=model, timeout=timeout, cache_friendly=cache_friendly,
                         abort_on_failure=abort_on_failure, context_length=context_length)


__all__ = ["SUMMARIZER_KINDS", "build_summarizer"]
