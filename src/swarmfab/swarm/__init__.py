"""The swarm: the run loop and the gate (blackboard, archive and executors to come)."""

from swarmfab.swarm.gate import GateDecision, judge
from swarmfab.swarm.run import Run, RunResult

__all__ = ["GateDecision", "Run", "RunResult", "judge"]
