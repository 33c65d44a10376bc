"""LLM agents: chat models (OpenAI-compatible or Anthropic) as variation operators.

``llm_agents(settings)`` builds one agent per role and an optional reviewer, all
sharing one provider and one spend budget. See ``agent.py`` for the repair loop,
``packer.py`` for what a model is shown and ``edits.py`` for how replies are applied.
"""

from __future__ import annotations

from swarmfab.agents.llm.agent import LLMAgent
from swarmfab.agents.llm.providers import (
    AnthropicProvider,
    Completion,
    Message,
    OpenAIProvider,
    Provider,
    make_provider,
)
from swarmfab.agents.llm.reviewer import Review, Reviewer
from swarmfab.agents.llm.spend import Pricing, Spend, usd_budget
from swarmfab.goal import LLMSettings

__all__ = [
    "AnthropicProvider",
    "Completion",
    "LLMAgent",
    "Message",
    "OpenAIProvider",
    "Pricing",
    "Provider",
    "Review",
    "Reviewer",
    "Spend",
    "llm_agents",
    "make_provider",
]


def llm_agents(settings: LLMSettings, provider: Provider | None = None
               ) -> tuple[list[LLMAgent], Reviewer | None, Spend]:
    """One agent per role of ``settings``, the reviewer if asked for, and their ledger
    (a GoalError first where the dollar budget could not be enforced)."""
    pricing = Pricing.of(settings)
    spend = Spend(pricing, usd_budget(settings, pricing), settings.budget_tokens)
    provider = provider or make_provider(settings)
    agents = [LLMAgent(f"llm-{role}", role, provider, spend, settings)
              for role in settings.roles]
    reviewer = Reviewer(provider, spend, settings) if settings.review else None
    return agents, reviewer, spend
