"""The reviewer: a second opinion on a winning diff, looking for benchmark gaming.

It reads what changed between the champion it replaced and an LLM-authored candidate
that just became champion, with the figures it won with, and answers CLEAN or
SUSPICIOUS with reasons. Its opinion is recorded next to the run's events; it never
overrides the verifier, and a reviewer that fails (budget, provider) records that
instead.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from swarmfab.agents.llm.prompts import REVIEW_SYSTEM, review_message
from swarmfab.agents.llm.providers import Message, Provider
from swarmfab.agents.llm.spend import Spend
from swarmfab.errors import ProviderError
from swarmfab.goal import LLMSettings
from swarmfab.records import Candidate, Verdict

__all__ = ["Review", "Reviewer"]

_VERDICT = re.compile(r"VERDICT:\s*\**\s*(SUSPICIOUS|CLEAN)", re.I)
_REVIEW_TOKENS = 1024


@dataclass(frozen=True, slots=True)
class Review:
    """``opinion``: clean, suspicious, or unavailable (no answer could be had)."""

    candidate_id: str
    opinion: str
    text: str
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None

    def to_json(self) -> str:
        return json.dumps({"agent": "llm-reviewer", "candidate": self.candidate_id,
                           "opinion": self.opinion, "text": self.text[:2000],
                           "input_tokens": self.input_tokens,
                           "output_tokens": self.output_tokens, "cost_usd": self.cost_usd})


class Reviewer:
    """Reads winning diffs of LLM-authored champions; shares the agents' spend budget."""

    def __init__(self, provider: Provider, spend: Spend, settings: LLMSettings):
        self.provider, self.spend, self.settings = provider, spend, settings

    def wants(self, candidate: Candidate) -> bool:
        """Only code a model wrote is reviewed; the design space's templates are ours."""
        return candidate.agent.startswith("llm-")

    def review(self, candidate: Candidate, replaced: Candidate | None,
               verdict: Verdict | None) -> Review:
        exhausted = self.spend.exhausted()
        if exhausted is not None:
            return Review(candidate.id, "unavailable", f"not reviewed: {exhausted}")
        messages = [Message("system", REVIEW_SYSTEM),
                    Message("user", review_message(candidate, replaced, verdict))]
        try:
            completion = self.provider.complete(messages, _REVIEW_TOKENS, 0.0)
        except ProviderError as exc:
            self.spend.failures += 1
            return Review(candidate.id, "unavailable", f"not reviewed: {exc}")
        cost = self.spend.charge("llm-reviewer", completion)
        found = _VERDICT.search(completion.text)
        opinion = found.group(1).lower() if found else "unclear"
        return Review(candidate.id, opinion, completion.text.strip(), completion.input_tokens,
                      completion.output_tokens, cost)
