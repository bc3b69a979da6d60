"""Settings → the summarizer (and its LLM clients), the same way for every surface.

``refold serve``, ``refold chat``, ``refold compact`` and ``refold sessions compact`` all call
``summarizer_setup``; it reads ``Settings.summarizer`` / ``summarizer_url`` / ``summarizer_model``
/ ``summarizer_api_key`` (defaulting to ``upstream`` / ``model`` / ``upstream_api_key``) and hands
explicit arguments to the library's ``refold.runtime.build_summarizer``. No click import here: the
server imports this module too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from refold.cli.settings import Settings
from refold.errors import InvalidInput


@dataclass
class SummarizerSetup:
    """The summarizer plus the clients it owns (``close`` them when the surface stops)."""

    summarizer: Any
    client: Any | None = None  # the summary endpoint (also the memory reviewer's model)
    owned: list[Any] = field(default_factory=list)

    def close(self) -> None:
        for client in self.owned:
            client.close()
        self.owned.clear()


def summarizer_setup(settings: Settings, *, choice: str | None = None,
                     model: str | None = None) -> SummarizerSetup:
    """The summarizer ``choice`` (default ``settings.summarizer``) for main ``model``."""
    from refold.runtime.summarizers import build_summarizer

    kind = choice or settings.summarizer
    model = model or settings.model
    if kind != "llm":
        return SummarizerSetup(build_summarizer(kind, model=model))
    from refold.llm import HttpChatClient

    url = settings.summarizer_url or settings.upstream
    if not url:
        raise InvalidInput("the llm summarizer needs an endpoint",
                           hint="set REFOLD_SUMMARIZER_URL or REFOLD_UPSTREAM (…/v1)")
    client = HttpChatClient(url, settings.summarizer_api_key or settings.upstream_api_key)
    owned = [client]
    main_client = None
    if settings.upstream and settings.upstream.rstrip("/") != url.rstrip("/"):
        # the fallback to the main model goes to the main endpoint, not the summary one
        main_client = HttpChatClient(settings.upstream, settings.upstream_api_key)
        owned.append(main_client)
    summarizer = build_summarizer("llm", model=model, client=client,
                                  summarizer_model=settings.summarizer_model,
                                  main_client=main_client)
    return SummarizerSetup(summarizer, client, owned)


__all__ = ["SummarizerSetup", "summarizer_setup"]
