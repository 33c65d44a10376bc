"""A built-in agent that starts a run where related earlier runs ended.

It proposes the champion settings the store recalls for this run's context (see
``knowledge/recall.py``), most similar first, each once, projected onto this run's
design space; then it has nothing more to say and the domain agents search on from
whichever of them the gate crowned.
"""

from __future__ import annotations

from collections.abc import Sequence

from swarmfab.agents.base import Agent, Context, fresh_candidates
from swarmfab.knowledge.recall import Recalled, project
from swarmfab.records import Candidate

__all__ = ["RecallAgent"]


class RecallAgent(Agent):
    """Proposes earlier champions' settings before the domain agents move (it keeps its
    turn while it has any)."""

    first = True

    def __init__(self, recalled: Sequence[Recalled], agent_id: str = "builtin-recall"):
        super().__init__(agent_id, "memory")
        self.recalled = tuple(recalled)

    def propose(self, context: Context, limit: int = 1) -> list[Candidate]:
        settings = ((project(item.knobs, context.space), f"recalled: {item.describe()}")
                    for item in self.recalled)
        return fresh_candidates(context, settings, agent=self.id, limit=limit)
