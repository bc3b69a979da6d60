"""Calibration of estimates from the provider's own ``usage.prompt_tokens``, learned per model.

After each call the runtime reports (what we estimated, what the provider billed); the ratio is
smoothed (exponential moving average) and clamped, so one odd reading cannot swing the next
decision. ``CalibratedCounter`` applies the ratio to an estimating counter's totals; exact
counters are left alone (their readings already match the vocabulary).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from refold._records import dataclass
from refold.messages.model import Message
from refold.tokens.counter import MessageCounter

MIN_RATIO = 0.5
MAX_RATIO = 3.0
MAX_MODELS = 256  # calibrations kept (the names come from requests: bounded)


@dataclass(frozen=True)
class CalibrationState:
    ratio: float
    samples: int


class Calibration:
    """Per-model ratio ``reported / estimated``; thread-safe, in memory."""

    def __init__(self, *, smoothing: float = 0.3) -> None:
        self.smoothing = smoothing
        self._states: dict[str, CalibrationState] = {}
        self._lock = threading.Lock()

    def observe(self, model: str, estimated: int, reported: int) -> CalibrationState:
        """Fold one reading in; readings of 0 or less are ignored."""
        key = model.lower()
        with self._lock:
            current = self._states.get(key)
            if estimated <= 0 or reported <= 0:
                return current or CalibrationState(1.0, 0)
            sample = min(MAX_RATIO, max(MIN_RATIO, reported / estimated))
            if current is None or current.samples == 0:
                state = CalibrationState(sample, 1)
            else:
                ratio = current.ratio + self.smoothing * (sample - current.ratio)
                state = CalibrationState(ratio, current.samples + 1)
            self._states.pop(key, None)
            self._states[key] = state  # newest last: the oldest model goes past the bound
            while len(self._states) > MAX_MODELS:  # model names come from clients
                del self._states[next(iter(self._states))]
            return state

    def ratio(self, model: str) -> float:
        state = self._states.get(model.lower())
        return state.ratio if state else 1.0

    def state(self, model: str) -> CalibrationState:
        return self._states.get(model.lower(), CalibrationState(1.0, 0))


class CalibratedCounter(MessageCounter):
    """Wraps a counter; estimates are scaled by the model's learned ratio (exact ones are not)."""

    def __init__(self, base: MessageCounter, calibration: Calibration, model: str) -> None:
        super().__init__(image_tokens=base.image_tokens, message_overhead=base.message_overhead)
        self.base = base
        self.calibration = calibration
        self.model = model
        self.exact = base.exact
        self.name = base.name if base.exact else f"{base.name}(calibrated)"

    def _scale(self, value: int) -> int:
        if self.base.exact:
            return value
        return round(value * self.calibration.ratio(self.model))

    def count_text(self, text: str) -> int:
        return self._scale(self.base.count_text(text))

    def count_message(self, message: Message) -> int:
        return self._scale(self.base.count_message(message))

    def count_messages(self, messages: Sequence[Message]) -> int:
        return self._scale(self.base.count_messages(messages))

    def count_tools(self, tools: Sequence[dict[str, Any]] | None) -> int:
        return self._scale(self.base.count_tools(tools))

    def observe_usage(self, messages: Sequence[Message], reported_prompt_tokens: int,
                      tools: Sequence[dict[str, Any]] | None = None) -> CalibrationState:
        """Learn from a provider reading for exactly this request (unscaled estimate vs usage)."""
        estimated = self.base.count_messages(messages) + self.base.count_tools(tools)
        return self.calibration.observe(self.model, estimated, reported_prompt_tokens)
