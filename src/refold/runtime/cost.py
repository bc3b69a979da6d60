"""What one engine's sessions cost: replies priced, summary and review calls charged to the
session that caused them, and the optional per-session budget.

``CostBook`` holds the prices (``refold.pricing``'s table with the user's overrides) and the
budget, and is the one place usage becomes ``cost_usd``:

- a reply's usage is priced by ``reply_usage`` and lands in the reply's own transaction;
- a summary's usage (``CompactionReport.usage``) is charged by ``ContextOps.plan`` to the
  session whose history it summarized — whether or not the checkpoint is then kept (it was
  paid for either way);
- a memory review's usage is charged through ``MeteredClient`` to the session whose turn
  started it (``paying_for`` marks that session for the calls made under it, threads started
  there included when they copy the context, as the reviewer does).

Aux usage is added without a model name, so a session's ``model`` stays the model it talks to.
The budget compares the session's stored ``cost_usd`` (its summaries and reviews included)
with ``limit_usd`` before each turn: ``warn`` adds a warning to ``Prepared.warnings``,
``refuse`` raises ``BudgetExceeded`` (the proxy answers 402 in the provider's error shape).
What other processes spend on the same session is seen when the session is next read.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Mapping
from typing import Any

from refold._records import dataclass
from refold.errors import BudgetExceeded, RefoldError
from refold.pricing import Price, cost_usd, price_for, token_count
from refold.store.base import Store, Usage

log = logging.getLogger(__name__)

# the session that pays for model calls made now (set around a turn's after-work)
_PAYER: contextvars.ContextVar[str | None] = contextvars.ContextVar("refold_payer",
                                                                    default=None)


class paying_for:  # noqa: N801  (a context manager used as a function)
    """Model calls made inside (and in threads started with a copy of this context) are
    charged to ``session_id``. (A plain class, not a generator: once per proxied turn.)"""

    __slots__ = ("_session_id", "_token")

    def __init__(self, session_id: str) -> None:
        self._session_id = session_id

    def __enter__(self) -> None:
        self._token = _PAYER.set(self._session_id)

    def __exit__(self, *exc: object) -> None:
        _PAYER.reset(self._token)


@dataclass(frozen=True)
class Budget:
    """A session's spending limit in USD; ``action`` is ``warn`` or ``refuse``."""

    limit_usd: float
    action: str = "warn"


def _tokens(usage: Mapping[str, Any]) -> tuple[int, int, int, int, int]:
    """(input incl. cached, output, cache read, cache write, of which 1-hour writes) from an
    OpenAI-shaped or an Anthropic-shaped usage object."""
    get = usage.get  # (no closure per call: this runs on every reply)
    details = get("prompt_tokens_details")
    cached = token_count(get("cache_read_input_tokens")) or (
        token_count(details.get("cached_tokens")) if isinstance(details, dict) else 0)
    written = token_count(get("cache_creation_input_tokens"))
    split = get("cache_creation")  # Anthropic: {"ephemeral_5m_…", "ephemeral_1h_…"}
    long = token_count(split.get("ephemeral_1h_input_tokens")) if isinstance(split, dict) else 0
    if "prompt_tokens" in usage or "completion_tokens" in usage:
        return (token_count(get("prompt_tokens")), token_count(get("completion_tokens")),
                cached, written, long)
    # Anthropic counts input without the cached parts
    return (token_count(get("input_tokens")) + cached + written,
            token_count(get("output_tokens")), cached, written, long)


def summarizer_model(summarizer: str) -> str | None:
    """The model behind a report's ``summarizer`` name (``llm:gpt-4o-mini`` → gpt-4o-mini)."""
    if summarizer.startswith("llm:"):
        return summarizer[4:].split()[0] or None
    return None


class CostBook:
    """Prices, the budget, and charging usage to sessions (see the module docstring)."""

    def __init__(self, store: Store | None = None, *,
                 overrides: Mapping[str, Price] | None = None,
                 budget: Budget | None = None) -> None:
        self.store = store
        self.overrides = dict(overrides or {})
        self._prices: dict[str | None, Price | None] = {}  # per model (a dict scan each reply)
        self.budget = budget
        self._lock = threading.Lock()

    def price(self, model: str | None) -> Price | None:
        try:
            return self._prices[model]
        except KeyError:
            price = self._prices[model] = price_for(model, self.overrides)
            if len(self._prices) > 256:  # a proxy may see any model name: stay bounded
                self._prices.pop(next(iter(self._prices)))
            return price
        except TypeError:  # not hashable: priced as before
            return price_for(model, self.overrides)

    def usage_of(self, usage: Mapping[str, Any] | None, model: str | None) -> Usage | None:
        """``usage`` as session totals to add, priced for ``model`` (None when empty)."""
        if not usage:
            return None
        input_tokens, output, cached, written, long = _tokens(usage)
        if not (input_tokens or output):
            return None
        price = self.price(model)
        cost = 0.0 if price is None else cost_usd(
            price, input_tokens=input_tokens, output_tokens=output, cache_read_tokens=cached,
            cache_write_tokens=written, long_cache_write_tokens=long)
        return Usage(input_tokens, output, cached, cost_usd=cost, model=model)

    def charge(self, session_id: str, usage: Mapping[str, Any] | None, model: str | None,
               *, what: str) -> Usage | None:
        """Add an aux call's usage (a summary, a review) to ``session_id``'s totals."""
        delta = self.usage_of(usage, model)
        if delta is None or self.store is None or not session_id:
            return None
        try:
            self.store.add_usage(session_id, input_tokens=delta.input_tokens,
                                 output_tokens=delta.output_tokens,
                                 cache_read_tokens=delta.cache_read_tokens,
                                 cost_usd=delta.cost_usd, model=None)
        except RefoldError as exc:  # accounting never breaks the turn that caused it
            log.warning("could not charge %s usage to session %s: %s", what, session_id, exc)
            return None
        return delta

    def charge_current(self, usage: Mapping[str, Any] | None, model: str | None, *,
                       what: str) -> Usage | None:
        """Charge the session marked by ``paying_for`` (nothing when none is)."""
        payer = _PAYER.get()
        return self.charge(payer, usage, model, what=what) if payer else None

    def check_budget(self, spent_usd: float) -> str | None:
        """A warning when ``spent_usd`` reached the budget; ``BudgetExceeded`` for refuse."""
        budget = self.budget
        if budget is None or spent_usd < budget.limit_usd:
            return None
        text = (f"this session has cost ${spent_usd:.4f}, reaching its budget of "
                f"${budget.limit_usd:.4f} (session_budget_usd)")
        if budget.action == "refuse":
            raise BudgetExceeded(text + ": the turn was refused",
                                 hint="raise [cost] session_budget_usd, or start a new session",
                                 spent_usd=spent_usd, budget_usd=budget.limit_usd)
        return text


class MeteredClient:
    """A ``ChatClient`` whose replies' usage is charged to the paying session (``paying_for``).
    Everything else is the wrapped client's."""

    def __init__(self, inner: Any, book: CostBook, *, what: str) -> None:
        self._inner = inner
        self._book = book
        self._what = what

    def complete(self, *args: Any, **kwargs: Any) -> Any:
        result = self._inner.complete(*args, **kwargs)
        model = getattr(result, "model", None) or kwargs.get("model")
        self._book.charge_current(getattr(result, "usage", None), model, what=self._what)
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


__all__ = ["Budget", "CostBook", "MeteredClient", "paying_for", "summarizer_model"]
