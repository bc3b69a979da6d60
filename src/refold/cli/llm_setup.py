"""The CLI's summarizer set-up is the library's: ``refold.assembly`` builds it for every surface.

Kept so ``from refold.cli.llm_setup import summarizer_setup`` keeps working.
"""

from refold.assembly import SummarizerSetup, summarizer_setup

__all__ = ["SummarizerSetup", "summarizer_setup"]
