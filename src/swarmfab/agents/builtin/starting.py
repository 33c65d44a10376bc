"""A built-in agent that measures a design space's named starting points first.

A space may name moves worth measuring before any search (``DesignSpace.starting``):
partial settings with the reason for each, as a study enqueues known-good trials before
its sampler runs. The engine space names one, every KDA slot on the kernel factory's
kernels for this host: the move the product exists to make. The gated delta rule's CPU
space names the other template, the per-token recurrence. Each is a move that a domain
agent drawing among a dozen untried arms would reach late in a short run.

Each starting point is proposed once, over the champion's setting (so a crowned earlier
move is kept; over the space's default when the champion is code no setting renders,
such as an LLM's edit), and judged like any candidate: verified, measured against the
champion, crowned only on the gate's evidence. The agent keeps its turn while it
proposes (``first``), one move at a time: while its last is being evaluated it passes,
so the next is made over the champion that verdict leaves (the domain agents fill the
other slots meanwhile). Then the agent has nothing more to say.
"""

from __future__ import annotations

from swarmfab.agents.base import Agent, Context, fresh_candidates
from swarmfab.records import Candidate

__all__ = ["StartingPointsAgent"]


class StartingPointsAgent(Agent):
    """Proposes each of the space's starting points once, before the domain agents."""

    first = True

    def __init__(self, agent_id: str = "builtin-starting"):
        super().__init__(agent_id, "starting points")
        self._proposed: set[str] = set()

    def propose(self, context: Context, limit: int = 1) -> list[Candidate]:
        if self._proposed & context.in_flight:
            return []  # the next move waits for the last one's verdict
        base = context.champion_setting()  # the default under a champion with no setting
        parents = (context.champion.id,) if context.champion is not None else ()
        settings = (({**base, **dict(move)}, f"starting point: {why}")
                    for move, why in context.space.starting)
        proposed = fresh_candidates(context, settings, agent=self.id, parents=parents,
                                    limit=1)
        self._proposed.update(candidate.id for candidate in proposed)
        return proposed
