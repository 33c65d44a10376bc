"""Does the search policy beat chance? The built-in agents against uniform random search.

Both policies search the same design space under the same evaluation budget, for several
seeds. Every distinct candidate either proposes is built, checked on a few corpus cases
(strong decay among them) and timed once, in the sandbox, on one shape, side by side with
the space's default (the ratio survives a busy machine's drift); the measurement is
shared by every policy and seed, so the two are judged on identical numbers. Every search
starts by evaluating the space's default setting; then a policy proposes. A policy keeps
the fastest candidate it has seen as its champion (a challenger must be faster by
:data:`PROMOTION_MARGIN`, as noise would otherwise promote ties).

The figure of merit is the number of evaluations a policy needs before its champion
reaches ``target`` (90%) of the best speed any evaluation found (the fastest candidates
are timed again, longer, before that speed is settled: see ``confirm_fastest``): the
median over seeds, with every seed's count, is what the table shows. A seed that never
gets there counts as one more than the budget (and is marked as such).
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from swarmfab.agents import Agent, Context
from swarmfab.agents.builtin import RestartAgent, bandit_agents
from swarmfab.evaluation import Evaluator, Implementation
from swarmfab.goal import Goal
from swarmfab.kernels import DesignSpace
from swarmfab.measure import TimingPolicy
from swarmfab.records import Candidate, Estimate, ShapeTiming, Status, Verdict
from swarmfab.workloads import Case

__all__ = ["POLICIES", "PolicyResult", "SpeedOracle", "compare_policies", "search_trace"]

PROMOTION_MARGIN = 0.01
QUICK_TIMING = TimingPolicy(min_rounds=3, max_rounds=7, max_seconds=0.6, warmup_calls=1)
CONFIRM_TIMING = TimingPolicy(min_rounds=10, max_rounds=40, max_seconds=3.0, warmup_calls=2)
CONFIRM = 6  # fastest candidates timed again before the best-known speed is settled
RECENT = 20  # verdicts an agent sees, as in a run


class SpeedOracle:
    """Time per call of each distinct candidate on the evaluator's (single) target shape,
    relative to a fixed reference (the space's default) timed side by side in the same
    job, so a busy machine's drift between measurements cancels out; expressed in the
    reference's seconds. None when the candidate fails to build or verify. Measured once,
    then remembered."""

    def __init__(self, evaluator: Evaluator, cases: Sequence[Case], reference: Candidate,
                 timing: TimingPolicy = QUICK_TIMING, log: Callable[[str], None] = print):
        self.evaluator, self.cases, self.timing, self.log = evaluator, list(cases), timing, log
        self.reference = reference
        self.seconds: dict[str, float | None] = {}
        self.candidates: dict[str, Candidate] = {}
        self.confirmed: set[str] = set()
        self._reference_s: float | None = None

    def __call__(self, candidate: Candidate) -> float | None:
        if candidate.id not in self.seconds:
            self.candidates[candidate.id] = candidate
            self.seconds[candidate.id] = self._measure(candidate)
        return self.seconds[candidate.id]

    def confirm_fastest(self, count: int = CONFIRM) -> bool:
        """Time the ``count`` fastest candidates not yet confirmed again, longer; their
        confirmed figures replace the first ones. One quick measurement among a hundred
        is sometimes lucky, and the fastest of many draws is where the lucky ones gather:
        without this the best-known speed is an outlier nobody can reach again. True when
        any candidate was re-timed."""
        measured = sorted((s, i) for i, s in self.seconds.items() if s is not None)
        pending = [i for _, i in measured if i not in self.confirmed][:count]
        for candidate_id in pending:
            self.confirmed.add(candidate_id)
            self.seconds[candidate_id] = self._measure(self.candidates[candidate_id],
                                                       CONFIRM_TIMING, "confirmed")
        return bool(pending)

    def _measure(self, candidate: Candidate, timing: TimingPolicy | None = None,
                 label: str = "") -> float | None:
        verdict = self.evaluator.verify(candidate, self.cases)
        if verdict.status is not Status.ACCEPTED:
            self.log(f"  {candidate.id[:10]} {verdict.status.value}: {verdict.reason[:80]}")
            return None
        reference = Implementation("reference", artifact=self.evaluator.build(self.reference))
        contender = Implementation("candidate", artifact=self.evaluator.build(candidate))
        (table,) = self.evaluator.side_by_side([reference, contender], timing or self.timing)
        if self._reference_s is None:
            self._reference_s = table.seconds["reference"].median
        ratio = table.ratio_to_reference["candidate"].median
        seconds = ratio * self._reference_s
        self.log(f"  {candidate.id[:10]} {ratio:6.3f} x reference = {seconds * 1e3:8.3f} ms  "
                 f"{label + '  ' if label else ''}{_knobs(candidate)}")
        return seconds


@dataclass(slots=True)
class PolicyResult:
    policy: str
    seed: int
    best_s: list[float] = field(default_factory=list)  # champion's time after each evaluation

    def evaluations_to(self, target_s: float) -> int | None:
        """First evaluation (1-based) whose champion is at least as fast as target_s."""
        return next((i + 1 for i, s in enumerate(self.best_s) if s <= target_s), None)


def _knobs(candidate: Candidate) -> str:
    return " ".join(f"{k}={v}" for k, v in candidate.knobs.items())


def _verdict(candidate: Candidate, seconds: float | None, champion_s: float | None) -> Verdict:
    """What an agent would have read in a run: timed against the champion, or rejected."""
    if seconds is None:
        return Verdict(candidate.id, Status.REJECTED, "failed to build or verify")
    base = champion_s or seconds
    ratio = Estimate(seconds / base, seconds / base, seconds / base)
    timing = ShapeTiming("policy bench", "champion", Estimate(seconds, seconds, seconds),
                         Estimate(base, base, base), ratio, "indistinguishable", 1)
    return Verdict(candidate.id, Status.ACCEPTED, "", timings=(timing,))


def search_trace(
    policy: str, space: DesignSpace, goal: Goal, oracle: Callable[[Candidate], float | None],
    seed: int, max_evaluations: int,
) -> PolicyResult:
    """One search: agents (or uniform random draws) propose, the oracle measures."""
    agents: list[Agent] = list(POLICIES[policy](space))
    fallback = RestartAgent()
    rng = random.Random(f"{policy}/{seed}")
    result = PolicyResult(policy, seed)
    champion: Candidate | None = None
    champion_s = math.inf
    evaluated: set[str] = set()
    recent: list[Verdict] = []
    turn = 0
    start = space.instantiate(space.default(), threads=goal.threads, agent="start")
    while len(result.best_s) < max_evaluations:
        context = Context(goal, space, champion, frozenset(evaluated), tuple(recent[-RECENT:]),
                          (), rng)
        proposal = start if not evaluated else None  # every policy starts at the default
        for _ in range(len(agents) if proposal is None else 0):
            found = agents[turn % len(agents)].propose(context, limit=1)
            turn += 1
            if found:
                proposal = found[0]
                break
        if proposal is None:
            found = fallback.propose(context, limit=1)
            if not found:
                break
            proposal = found[0]
        evaluated.add(proposal.id)
        seconds = oracle(proposal)
        recent.append(_verdict(proposal, seconds, None if champion is None else champion_s))
        if seconds is not None and seconds < champion_s * (1 - PROMOTION_MARGIN):
            champion, champion_s = proposal, seconds
        result.best_s.append(champion_s)
    return result


def compare_policies(
    space: DesignSpace, goal: Goal, oracle: Callable[[Candidate], float | None],
    seeds: Sequence[int],
    max_evaluations: int, policies: Sequence[str] = ("builtin", "uniform-random"),
) -> list[PolicyResult]:
    """Every policy and seed; then the fastest candidates are timed again and the
    searches replayed on the confirmed figures (decisions may change, and newly proposed
    candidates are measured), until the fastest ones are all confirmed (at most 3 rounds)."""
    def searches() -> list[PolicyResult]:
        return [search_trace(policy, space, goal, oracle, seed, max_evaluations)
                for seed in seeds for policy in policies]

    results = searches()
    if isinstance(oracle, SpeedOracle):  # a plain function's figures are exact
        for _ in range(3):
            if not oracle.confirm_fastest():
                break
            results = searches()
    return results


def summary(results: Sequence[PolicyResult], target: float, max_evaluations: int
            ) -> tuple[float, list[tuple[str, list[int | None], float]]]:
    """Best-known time, and per policy: evaluations to reach ``target`` of its speed per
    seed (None: never), and their median (a miss counts as max_evaluations + 1)."""
    best = min(min(r.best_s) for r in results if r.best_s)
    target_s = best / target
    rows = []
    for policy in dict.fromkeys(r.policy for r in results):
        counts = [r.evaluations_to(target_s) for r in results if r.policy == policy]
        median = statistics.median(c if c is not None else max_evaluations + 1 for c in counts)
        rows.append((policy, counts, median))
    return best, rows


def _uniform_random(space: DesignSpace) -> list[Agent]:
    return [RestartAgent("uniform-random", kick=False)]  # uniform draws, nothing else


POLICIES: dict[str, Callable[[DesignSpace], Sequence[Agent]]] = {
    "builtin": lambda space: bandit_agents(space.knobs),
    "uniform-random": _uniform_random,
}
