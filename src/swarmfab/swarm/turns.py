"""Whose turn it is to propose.

Agents are asked in order, one proposal each. An agent marked ``first`` (the starting
points, recall) keeps the turn for as long as it proposes (agents listed before it, LLM
agents with ``--agents llm,builtin``, still lead), and once its turn has come it is asked
ahead of the others every time: one that passes while its last move is evaluated
proposes the next as soon as that verdict is in, not after a round of the other agents.
An agent the supervisor benched sits out its turns. When every agent is dry, or the
supervisor asked for exploration, the fallback agent is asked.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from swarmfab.agents import Agent, Context
from swarmfab.records import Candidate
from swarmfab.swarm.supervisor import Intervention

__all__ = ["Turns"]


class Turns:
    """The order in which a run asks its agents (module doc)."""

    def __init__(self, agents: Sequence[Agent], fallback: Agent | None = None):
        self.agents = list(agents)
        self.fallback = fallback  # asked only when every agent is out of proposals
        self._turn = 0
        self._explore = 0  # turns the fallback is asked first
        self._benched: dict[str, int] = {}  # agent id -> turns left to sit out
        self._reached: set[str] = set()  # first agents whose turn has come

    def next(
        self, ask: Callable[[Agent, Context], list[Candidate]],
        context: Callable[[Agent | None], Context],
    ) -> tuple[Agent, Candidate] | None:
        """The next proposal and its author, from ``ask(agent, context(agent))``; None
        when no agent, nor the fallback, has one. ``context(None)`` is the fallback's."""
        if self._explore > 0 and self.fallback is not None:
            self._explore -= 1
            found = ask(self.fallback, context(None))
            if found:
                return self.fallback, found[0]
        passed: list[Agent] = []  # asked just now, with nothing to propose
        for agent in self.agents:  # first agents whose turn has come, ahead of the rest
            if agent.first and agent.id in self._reached and not self._benched.get(agent.id):
                found = ask(agent, context(agent))
                if found:
                    return agent, found[0]
                passed.append(agent)
        for _ in range(len(self.agents)):
            agent = self.agents[self._turn % len(self.agents)]
            if self._benched.get(agent.id, 0) > 0:
                self._benched[agent.id] -= 1
                self._turn += 1
                continue
            if any(agent is other for other in passed):  # not asked twice in one call
                self._turn += 1
                continue
            if agent.first:
                self._reached.add(agent.id)
            found = ask(agent, context(agent))
            self._turn += not (found and agent.first)  # a first agent keeps it to propose
            if found:
                return agent, found[0]
        if self.fallback is None:
            return None
        found = ask(self.fallback, context(None))
        return (self.fallback, found[0]) if found else None

    def follow(self, intervention: Intervention) -> None:
        """The supervisor's word: explore (the fallback first) or bench an agent."""
        if intervention.kind == "explore":
            self._explore = intervention.turns
        elif intervention.agent is not None:
            self._benched[intervention.agent] = intervention.turns
