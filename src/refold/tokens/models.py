"""Which vocabulary a model name uses, and the ``get_counter`` factory.

Matching is by name, after dropping a provider prefix (``openai/gpt-4o`` → ``gpt-4o``); the
first rule that matches wins, so the o200k families are tried before the older ``gpt-4``.
Unknown models (Claude, Gemini, DeepSeek, Mistral…) get the CJK-aware estimate, calibrated by
the provider's usage readings.
"""

from __future__ import annotations

import re
import threading

from refold.tokens.calibration import CalibratedCounter, Calibration
from refold.tokens.counter import MessageCounter
from refold.tokens.estimate import EstimateCounter
from refold.tokens.exact import ExactCounter

_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"gpt-oss"), "o200k_harmony"),
    (re.compile(r"gpt-4o|gpt-4\.1|gpt-4\.5|gpt-5|chatgpt|(?:^|[^a-z0-9])o[1345](?:$|[-_:.])"),
     "o200k_base"),
    (re.compile(r"gpt-4|gpt-3\.5|text-embedding|davinci"), "cl100k_base"),
    (re.compile(r"qwen|qwq"), "qwen3"),
    (re.compile(r"llama-?3|llama-?4|meta-llama"), "llama3"),
)
_LOCK = threading.Lock()
_SHARED: dict[str, MessageCounter] = {}
DEFAULT_CALIBRATION = Calibration()


def encoding_for_model(model: str | None) -> str | None:
    """The exact vocabulary for ``model``, or None when only an estimate is possible."""
    if not model:
        return None
    name = model.lower().rsplit("/", 1)[-1]
    for pattern, encoding in _RULES:
        if pattern.search(name):
            return encoding
    return None


def _base_counter(encoding: str | None) -> MessageCounter:
    key = encoding or "estimate"
    with _LOCK:
        counter = _SHARED.get(key)
        if counter is None:
            counter = ExactCounter(encoding) if encoding else EstimateCounter()
            _SHARED[key] = counter
        return counter


def get_counter(model: str | None = None, *, calibration: Calibration | None = None,
                exact: bool = True) -> CalibratedCounter:
    """A counter for ``model``: exact when its vocabulary ships offline, else a calibrated estimate.

    The base counters (and their per-message caches) are shared per vocabulary in the process.
    ``exact=False`` forces the estimate (cheap, e.g. for a rough preflight).
    """
    encoding = encoding_for_model(model) if exact else None
    return CalibratedCounter(_base_counter(encoding), calibration or DEFAULT_CALIBRATION,
                             model or "unknown")
