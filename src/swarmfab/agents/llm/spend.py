"""Token and cost accounting, and the spend budget every LLM agent of a run shares.

Cost is only claimed where the price is known: the goal's own prices, or the list
prices of a few well-known models below. For any other model (a local vLLM server,
say) the cost is reported as unknown rather than zero, and only the token budget, if
any, can stop the agents; a dollar budget asked for such a model is refused before the
run starts (:func:`usd_budget`), since nothing could hold it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from swarmfab.agents.llm.providers import Completion
from swarmfab.errors import GoalError
from swarmfab.goal import LLMSettings

__all__ = ["DEFAULT_BUDGET_USD", "KNOWN_PRICES", "Pricing", "Spend", "usd_budget"]

DEFAULT_BUDGET_USD = 1.0  # a priced model's budget where the goal names none

# USD per million (input, output) tokens, list prices; a model name matches by prefix.
KNOWN_PRICES: dict[str, tuple[float, float]] = {
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4o": (2.50, 10.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1": (2.00, 8.00),
    "claude-3-5-haiku": (0.80, 4.00),
    "claude-haiku-4": (1.00, 5.00),
    "claude-sonnet-4": (3.00, 15.00),
    "claude-opus-4": (15.00, 75.00),
}


@dataclass(frozen=True, slots=True)
class Pricing:
    """USD per million input and output tokens; None when not known."""

    input_per_mtok: float | None
    output_per_mtok: float | None

    @property
    def known(self) -> bool:
        return self.input_per_mtok is not None and self.output_per_mtok is not None

    def cost(self, input_tokens: int, output_tokens: int) -> float | None:
        if self.input_per_mtok is None or self.output_per_mtok is None:
            return None
        return (input_tokens * self.input_per_mtok + output_tokens * self.output_per_mtok) / 1e6

    @staticmethod
    def of(settings: LLMSettings) -> Pricing:
        """The goal's prices, else the list price of a known model, else unknown."""
        if settings.price_input is not None and settings.price_output is not None:
            return Pricing(settings.price_input, settings.price_output)
        model = settings.model or ""
        for prefix in sorted(KNOWN_PRICES, key=len, reverse=True):
            if model.startswith(prefix) and settings.base_url is None:
                return Pricing(*KNOWN_PRICES[prefix])
        return Pricing(None, None)


def usd_budget(settings: LLMSettings, pricing: Pricing) -> float | None:
    """The dollar budget the agents are held to: the goal's, else DEFAULT_BUDGET_USD for
    a priced model, else none (an unpriced model without a budget asked for). A budget
    asked for a model whose price is unknown is a GoalError naming what to pass."""
    if pricing.known:
        return DEFAULT_BUDGET_USD if settings.budget_usd is None else settings.budget_usd
    if settings.budget_usd is None:
        return None
    where = f" at {settings.base_url}" if settings.base_url else ""
    raise GoalError(
        f"a budget of ${settings.budget_usd:g} cannot be enforced: the price of model "
        f"{settings.model!r}{where} is unknown. Give it with --llm-price-input and "
        "--llm-price-output (USD per million tokens; goal keys llm.price_input and "
        "llm.price_output), or cap tokens instead with --llm-budget-tokens N "
        "(llm.budget_tokens) and no --llm-budget-usd")


@dataclass(slots=True)
class Spend:
    """What the LLM agents of one run have used so far, against their budget."""

    pricing: Pricing
    budget_usd: float | None  # None: no dollar budget (the price is unknown)
    budget_tokens: int | None = None
    calls: int = 0
    failures: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    estimated_calls: int = 0
    cost_usd: float = 0.0
    by_agent: dict[str, int] = field(default_factory=dict)

    def charge(self, agent_id: str, completion: Completion) -> float | None:
        """Add one call's tokens; returns its cost (None: price unknown)."""
        self.calls += 1
        self.by_agent[agent_id] = self.by_agent.get(agent_id, 0) + 1
        self.input_tokens += completion.input_tokens
        self.output_tokens += completion.output_tokens
        self.estimated_calls += completion.estimated
        cost = self.pricing.cost(completion.input_tokens, completion.output_tokens)
        self.cost_usd += cost or 0.0
        return cost

    def exhausted(self) -> str | None:
        """Why no more calls may be made, or None while budget remains."""
        if self.pricing.known and self.budget_usd is not None \
                and self.cost_usd >= self.budget_usd:
            return f"spent ${self.cost_usd:.4f} of the ${self.budget_usd:.2f} budget"
        tokens = self.input_tokens + self.output_tokens
        if self.budget_tokens is not None and tokens >= self.budget_tokens:
            return f"used {tokens} of the {self.budget_tokens} token budget"
        return None

    def summary(self) -> dict[str, object]:
        return {
            "calls": self.calls, "failures": self.failures,
            "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
            "estimated_calls": self.estimated_calls,
            "cost_usd": round(self.cost_usd, 6) if self.pricing.known else None,
            "budget_usd": self.budget_usd, "budget_tokens": self.budget_tokens,
        }
