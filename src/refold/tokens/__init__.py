"""Token counting: exact offline vocabularies, a CJK-aware estimate, provider calibration.

    counter = get_counter("gpt-4o")          # exact (o200k), cached per message
    counter.count_messages(messages) + counter.count_tools(tools)
    counter.observe_usage(messages, usage["prompt_tokens"])   # learn the ratio per model
"""

from refold.tokens.calibration import CalibratedCounter, Calibration, CalibrationState
from refold.tokens.counter import (
    IMAGE_TOKENS,
    MESSAGE_OVERHEAD,
    REPLY_PRIMING,
    MessageCounter,
    TokenCounter,
    message_fingerprint,
)
from refold.tokens.estimate import EstimateCounter, chars_per_four, estimate_tokens
from refold.tokens.exact import ENCODINGS, ExactCounter, load_encoding
from refold.tokens.models import DEFAULT_CALIBRATION, encoding_for_model, get_counter

__all__ = [
    "DEFAULT_CALIBRATION",
    "ENCODINGS",
    "IMAGE_TOKENS",
    "MESSAGE_OVERHEAD",
    "REPLY_PRIMING",
    "CalibratedCounter",
    "Calibration",
    "CalibrationState",
    "EstimateCounter",
    "ExactCounter",
    "MessageCounter",
    "TokenCounter",
    "chars_per_four",
    "encoding_for_model",
    "estimate_tokens",
    "get_counter",
    "load_encoding",
    "message_fingerprint",
]
