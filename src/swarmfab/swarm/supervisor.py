"""The supervisor: notices when the search stops making progress, and redirects it.

It watches every verdict and proposes an intervention when the swarm stagnates: no new
champion for ``patience`` evaluations (explore: larger moves from the fallback agent
for a while), the same failure again and again from one agent, or one agent proposing
again and again what is already judged or being evaluated (bench that agent for a
while). The run applies interventions and records each one, with its reason.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from swarmfab.records import Status, Verdict

__all__ = ["Intervention", "Supervisor"]


@dataclass(frozen=True, slots=True)
class Intervention:
    kind: str  # "explore" or "bench-agent"
    reason: str
    agent: str | None = None  # the agent benched, for "bench-agent"
    turns: int = 0  # how many proposals the intervention lasts


class Supervisor:
    """Stateful observer of one run's verdicts."""

    def __init__(self, patience: int = 8, repeated_failures: int = 4, turns: int = 4,
                 repeated_proposals: int = 3):
        self.patience, self.repeated_failures, self.turns = patience, repeated_failures, turns
        self.repeated_proposals = repeated_proposals
        self.since_champion = 0
        self._refused: dict[str, int] = {}
        self._failures: deque[tuple[str, str]] = deque(maxlen=repeated_failures)

    def refused(self, agent: str, candidate: str) -> Intervention | None:
        """``agent`` proposed a candidate that is judged or in flight already."""
        self._refused[agent] = self._refused.get(agent, 0) + 1
        if self._refused[agent] < self.repeated_proposals:
            return None
        self._refused[agent] = 0
        return Intervention(
            "bench-agent", f"{agent} proposed {self.repeated_proposals} candidates in a row that "
            f"were judged or in flight already (last {candidate[:10]})", agent=agent,
            turns=self.turns)

    def observe(self, agent: str, verdict: Verdict, promoted: bool) -> Intervention | None:
        self._refused.pop(agent, None)  # it proposed something new
        if promoted:
            self.since_champion = 0
            self._failures.clear()
            return None
        self.since_champion += 1
        if verdict.status is not Status.ACCEPTED:
            self._failures.append((agent, _gist(verdict)))
            if (len(self._failures) == self.repeated_failures
                    and len(set(self._failures)) == 1):
                self._failures.clear()
                return Intervention(
                    "bench-agent", f"{agent} failed {self.repeated_failures} times in a row the "
                    f"same way ({_gist(verdict)})", agent=agent, turns=self.turns)
        if self.since_champion >= self.patience:
            self.since_champion = 0
            return Intervention(
                "explore", f"no new champion for {self.patience} evaluations: larger moves",
                turns=self.turns)
        return None


def _gist(verdict: Verdict) -> str:
    """The kind of a failure, without the figures that change from case to case."""
    head = verdict.reason.split(":")[0]
    return f"{verdict.status.value}: {head}"
