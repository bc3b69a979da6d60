"""Token prices per model and what a session's usage costs.

A shipped table of list prices in USD per million tokens — input, output, cache read and
cache write — for common models; ``refold.toml`` overrides or adds models (``[pricing."name"]``
with the same four keys). Pure functions: no I/O, no environment.

Usage is counted the OpenAI way: ``input_tokens`` includes the cached prompt tokens, so the
uncached input is ``input_tokens - cache_read_tokens``. A model is found by its exact name,
else by the longest table name it starts with, up to a separator (``gpt-4o-mini-2024-07-18`` →
``gpt-4o-mini``; ``gpt-5.2`` is not ``gpt-5``),
else it has no price (``None``: shown as unknown, never as a made-up zero).

The shipped figures are list prices; they change, which is why overrides exist. Checked on
2026-12-01 against public copies of the providers' pricing pages (no network from here):
- OpenAI (gpt-4o, gpt-4o-mini, gpt-4.1*, o3, o4-mini; input / cached input / output): several
  independent tables in public code and pages agree (e.g. deploybase.ai "OpenAI pricing",
  March 2026, citing platform.openai.com/docs/pricing; domderen/openai-usage
  ``model_costs.py`` for the cached rates). o3 is the June 2025 price ($2 / $8), not launch's.
- Anthropic (Opus 4 / 4.1, Sonnet 4 / 4.5, Haiku 4.5, Haiku 3.5; input / 5-minute cache write /
  cache hit / output): the prompt-caching pricing table of Anthropic's docs (copy in
  patrickcarmichael/claude-docs, updated 2025-11-08). Names match by prefix, so
  ``claude-sonnet-4-5-20250929`` is priced as ``claude-sonnet-4``.
- DeepSeek (deepseek-chat, deepseek-reasoner, both DeepSeek-V3.2): api-docs.deepseek.com
  "Models & Pricing" as quoted by benchlm.ai, April 2026: $0.28 input (cache miss), $0.028
  cache hit, $0.42 output for both (the older $0.27 / $0.55 V3 / R1 rates are gone).
- Claude Opus 4.5 and 4.6 ($5 input, $25 output; 5-minute cache write 1.25x, cache hit 0.1x):
  deploybase.ai "Claude API pricing" (March 2026) and markaicode's Opus 4.5 / GPT-5 comparison
  (February 2026, cache write $6.25) agree; Opus 4 / 4.1 keep $15 / $75.
- GPT-5 family (gpt-5 $1.25 / cached $0.125 / $10, gpt-5-mini $0.25 / $0.025 / $2, gpt-5-nano
  $0.05 / $0.005 / $0.40; ``gpt-5-codex`` is priced as gpt-5): crazyrouter.com "GPT-5 pricing"
  (April 2026) and markaicode (February 2026). Later point releases (``gpt-5.1``, ``gpt-5.2``…)
  are priced differently and are not in the table (a name matches a table name only up to a
  ``-``, ``@``, ``:``, ``/`` or ``_``, so ``gpt-5.2`` is not taken for ``gpt-5``).
- Gemini 2.5 (Pro $1.25 / $10 for prompts up to 200K tokens, Flash $0.30 / $2.50, Flash-Lite
  $0.10 / $0.40; cached input at 10%): deploybase.ai "Gemini API pricing 2026", citing Google's
  pricing page (March 2026). Longer Pro prompts cost more than this table says.
Not verified here: anything else — add it under ``[pricing."model"]``.
"""

from __future__ import annotations

from collections.abc import Mapping

from refold._records import dataclass
from refold.errors import InvalidInput


@dataclass(frozen=True)
class Price:
    """USD per million tokens."""

    input: float
    output: float
    cache_read: float = 0.0
    cache_write: float = 0.0


PRICES: dict[str, Price] = {
    "gpt-4o": Price(2.50, 10.00, 1.25),
    "gpt-4o-mini": Price(0.15, 0.60, 0.075),
    "gpt-4.1": Price(2.00, 8.00, 0.50),
    "gpt-4.1-mini": Price(0.40, 1.60, 0.10),
    "gpt-4.1-nano": Price(0.10, 0.40, 0.025),
    "o3": Price(2.00, 8.00, 0.50),
    "o4-mini": Price(1.10, 4.40, 0.275),
    "gpt-5": Price(1.25, 10.00, 0.125),  # also gpt-5-codex
    "gpt-5-mini": Price(0.25, 2.00, 0.025),
    "gpt-5-nano": Price(0.05, 0.40, 0.005),
    "claude-opus-4": Price(15.00, 75.00, 1.50, 18.75),  # also claude-opus-4-1
    "claude-opus-4-5": Price(5.00, 25.00, 0.50, 6.25),
    "claude-opus-4-6": Price(5.00, 25.00, 0.50, 6.25),
    "claude-sonnet-4": Price(3.00, 15.00, 0.30, 3.75),  # also claude-sonnet-4-5
    "claude-haiku-4-5": Price(1.00, 5.00, 0.10, 1.25),
    "claude-3-5-haiku": Price(0.80, 4.00, 0.08, 1.00),
    "deepseek-chat": Price(0.28, 0.42, 0.028),
    "deepseek-reasoner": Price(0.28, 0.42, 0.028),
    "gemini-2.5-pro": Price(1.25, 10.00, 0.125),
    "gemini-2.5-flash": Price(0.30, 2.50, 0.03),
    "gemini-2.5-flash-lite": Price(0.10, 0.40, 0.01),
}
_NAME_ENDS = "-@:/_"  # what may follow a table name in a model name it prices

_KEYS = ("input", "output", "cache_read", "cache_write")
MAX_TOKENS = 10**12  # a count above this in one usage report is garbage, not tokens


def token_count(value: object) -> int:
    """A usage report's count as tokens: a finite number from 0 to ``MAX_TOKENS`` (floored),
    else 0 — a provider's or a transcript's odd value (a string, NaN, infinity, 1e300) costs
    that count, never the reply or the import."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    if value != value or not 0 < value <= MAX_TOKENS:  # NaN, negative, infinite, absurd
        return 0
    return int(value)


def parse_overrides(raw: Mapping[str, Mapping[str, float]]) -> dict[str, Price]:
    """``{"model": {"input": …, "output": …, …}}`` from settings as prices (InvalidInput on a
    missing input/output, an unknown key or a negative price)."""
    out: dict[str, Price] = {}
    for model, fields in raw.items():
        unknown = set(fields) - set(_KEYS)
        if unknown or not {"input", "output"} <= set(fields):
            raise InvalidInput(f"bad pricing for {model!r}: give input and output (and "
                               "optionally cache_read, cache_write), USD per million tokens")
        values = {k: float(fields.get(k, 0.0)) for k in _KEYS}
        if any(v < 0 for v in values.values()):
            raise InvalidInput(f"bad pricing for {model!r}: prices cannot be negative")
        out[model] = Price(**values)
    return out


def price_for(model: str | None, overrides: Mapping[str, Price] | None = None) -> Price | None:
    """The price of ``model`` (overrides first), or None when it is not known."""
    if not model:
        return None
    table = {**PRICES, **(overrides or {})}
    if model in table:
        return table[model]
    prefixes = [name for name in table if model.startswith(name)
                and model[len(name)] in _NAME_ENDS]
    return table[max(prefixes, key=len)] if prefixes else None


LONG_CACHE_WRITE = 2.0  # Anthropic's 1-hour cache writes cost twice the base input price


def cost_usd(price: Price, *, input_tokens: int, output_tokens: int,
             cache_read_tokens: int = 0, cache_write_tokens: int = 0,
             long_cache_write_tokens: int = 0) -> float:
    """What the usage costs at ``price``. ``long_cache_write_tokens``: how many of the cache
    writes were 1-hour ones (Claude Code writes those), at ``LONG_CACHE_WRITE`` times the input
    price instead of ``cache_write`` (only where the price has a cache-write rate)."""
    uncached = max(0, input_tokens - cache_read_tokens - cache_write_tokens)
    long = min(max(0, long_cache_write_tokens), cache_write_tokens) if price.cache_write else 0
    total = (uncached * price.input + output_tokens * price.output
             + cache_read_tokens * price.cache_read
             + (cache_write_tokens - long) * price.cache_write
             + long * price.input * LONG_CACHE_WRITE)
    return total / 1_000_000


def usage_cost(model: str | None, *, input_tokens: int, output_tokens: int,
               cache_read_tokens: int = 0,
               overrides: Mapping[str, Price] | None = None) -> float:
    """What a reply's usage costs for ``model``; 0.0 when the model has no price."""
    price = price_for(model, overrides)
    if price is None:
        return 0.0
    return cost_usd(price, input_tokens=input_tokens, output_tokens=output_tokens,
                    cache_read_tokens=cache_read_tokens)
