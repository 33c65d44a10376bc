"""A domain agent that learns which moves pay: local search ranked by a bandit.

Plain local search tries the neighbours of the champion in random order, and forgets
everything when the champion changes. Here every move is an arm, ``knob -> value`` (for
instance ``chunk -> 32`` or ``isa -> avx512``), and the agent credits an arm with what
the candidates built from it measured: the log speedup over the champion they were timed
against, or a penalty when they were rejected or failed to build. Proposals around the
champion are ranked by an upper confidence bound on each arm's reward, so after a
re-base the moves that paid before are tried first and those that broke or slowed
kernels come last; joint moves rank by the sum of their arms.

Lessons of earlier runs enter as priors, not as an order: an arm's prior is the log
speedup the lesson measured for that move from the current base (the failure reward for
a move that only failed), scaled by the similarity of the lesson's context, and it
counts as one earlier pull. A move that hurt at another shape is tried later, not never,
and this run's own pulls soon outweigh what another context said. (Plain local search
ranks moves by lessons outright and passes turns to helpful moves of other domains; with
a strong recalled start that starved whole domains for a run's length.)

The agent knows nothing about the workload: arms are knob names and values of whatever
design space it is given. Rewards come only from the verdicts in its context and the
lessons in it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from swarmfab.agents.base import Context
from swarmfab.agents.builtin.local_search import LocalSearchAgent
from swarmfab.kernels import Knob, KnobValue
from swarmfab.records import Candidate, Lesson, Status, Verdict

__all__ = ["Arm", "ArmStats", "BanditAgent", "bandit_agents", "lesson_priors", "verdict_reward"]

Arm = tuple[str, KnobValue]  # knob name, value it moves to
FAILURE_REWARD = -1.0  # a rejected or unbuildable candidate: as bad as e-times slower
REWARD_CLIP = 1.0
EXPLORATION = 0.5  # weight of the confidence bonus (rewards are log speedups)
JOINT_LIMIT = 4096  # joint moves ranked per proposal at most (sampled beyond that)


def verdict_reward(verdict: Verdict) -> float:
    """Log speedup over the incumbent (geometric mean over shapes), clipped; a failure
    scores :data:`FAILURE_REWARD`."""
    if verdict.status is not Status.ACCEPTED or not verdict.timings:
        return FAILURE_REWARD
    logs = [math.log(t.ratio.inverted().median) for t in verdict.timings
            if t.ratio.median > 0 and math.isfinite(t.ratio.median)]
    if not logs:
        return FAILURE_REWARD
    return max(-REWARD_CLIP, min(REWARD_CLIP, sum(logs) / len(logs)))


def lesson_priors(lessons: Iterable[Lesson], base: Mapping[str, KnobValue]) -> dict[Arm, float]:
    """Prior rewards of the moves from ``base`` that lessons know: the measured log
    speedup (or :data:`FAILURE_REWARD` where every such move failed), clipped, times the
    similarity of the lesson's context to this run's."""
    priors: dict[Arm, float] = {}
    for lesson in lessons:
        if base.get(lesson.knob) != lesson.from_value:
            continue
        if lesson.failures and lesson.failures >= lesson.pairs:
            reward = FAILURE_REWARD
        elif lesson.effect is not None and lesson.effect.median > 0:
            reward = -math.log(lesson.effect.median)
        else:
            continue
        clipped = max(-REWARD_CLIP, min(REWARD_CLIP, reward))
        priors[(lesson.knob, lesson.to_value)] = lesson.similarity * clipped
    return priors


@dataclass(slots=True)
class ArmStats:
    pulls: int = 0
    total: float = 0.0

    def mean(self, prior: float) -> float:
        """The average reward, shrunk towards ``prior`` as if it were one earlier pull."""
        return (self.total + prior) / (self.pulls + 1)


class BanditAgent(LocalSearchAgent):
    """Owns one domain's knobs; ranks neighbour moves of the champion by UCB of their arm.

    ``prior`` gives arms a starting mean reward (for instance from lessons of earlier
    runs); arms without one start at zero: no better, no worse than staying put.
    """

    def __init__(self, agent_id: str, role: str, knobs: tuple[Knob, ...],
                 prior: Mapping[Arm, float] | None = None, exploration: float = EXPLORATION):
        super().__init__(agent_id, role, knobs)
        self.prior = dict(prior or {})
        self.exploration = exploration
        self.stats: dict[Arm, ArmStats] = {}
        self._pending: dict[str, tuple[Arm, ...]] = {}  # proposed id -> arms it pulled
        self._from_lessons: dict[Arm, float] = {}  # priors of moves from the current base

    def propose(self, context: Context, limit: int = 1) -> list[Candidate]:
        self._learn(context.recent)
        proposals = super().propose(context, limit)
        for candidate in proposals:
            if candidate.parents and context.champion is not None \
                    and candidate.parents[0] == context.champion.id:
                base = context.champion.knobs
                self._pending[candidate.id] = tuple(
                    (k.name, candidate.knobs[k.name]) for k in self.knobs
                    if candidate.knobs[k.name] != base.get(k.name))
        return proposals

    def _learn(self, verdicts: tuple[Verdict, ...]) -> None:
        """Credit the arms of our own proposals whose verdicts have arrived."""
        for verdict in verdicts:
            arms = self._pending.pop(verdict.candidate_id, None)
            if not arms:
                continue
            reward = verdict_reward(verdict)
            for arm in arms:
                stats = self.stats.setdefault(arm, ArmStats())
                stats.pulls += 1
                stats.total += reward

    def score(self, arm: Arm) -> float:
        """Upper confidence bound of an arm's reward (UCB1 with a prior pseudo-pull)."""
        stats = self.stats.get(arm, ArmStats())
        pulls = sum(s.pulls for s in self.stats.values())
        bonus = self.exploration * math.sqrt(math.log(pulls + 2) / (stats.pulls + 1))
        prior = self._from_lessons.get(arm, self.prior.get(arm, 0.0))
        return stats.mean(prior) + bonus

    def _yields_to_a_helpful_move(self, base: dict[str, KnobValue], context: Context) -> bool:
        return False  # lessons are priors of the arms here, not turns given away

    @staticmethod
    def _by_lessons(base: dict[str, KnobValue],
                    moves: Iterator[tuple[dict[str, KnobValue], str]], context: Context
                    ) -> Iterator[tuple[dict[str, KnobValue], str]]:
        return moves  # already ranked by scores that include the lessons' priors

    def _moves(
        self, base: dict[str, KnobValue], context: Context
    ) -> Iterator[tuple[dict[str, KnobValue], str]]:
        """The base itself, single steps best arm first, then joint moves by summed score."""
        self._from_lessons = lesson_priors(context.lessons, base)
        yield dict(base), "starting point of the search"
        steps = [(knob, value) for knob in self.knobs for value in knob.neighbours(base[knob.name])]
        context.rng.shuffle(steps)  # remaining ties in random order
        reach = _reach(context, base, [{**base, k.name: v} for k, v in steps])
        # best arm first; among equal scores (unseen arms) the move that changes more of
        # the rendered kernel, as a new template opens more than a flag does
        steps.sort(key=lambda step: (-round(self.score((step[0].name, step[1])), 9),
                                     -reach[(step[0].name, step[1])]))
        for knob, value in steps:
            arm = (knob.name, value)
            yield {**base, knob.name: value}, (
                f"{knob.name}: {base[knob.name]} -> {value} (arm score {self.score(arm):+.2f})")
        yield from self._joint_moves(base, context)

    def _joint_moves(
        self, base: dict[str, KnobValue], context: Context
    ) -> Iterator[tuple[dict[str, KnobValue], str]]:
        combos: list[tuple[KnobValue, ...]]
        total = math.prod(len(knob.values) for knob in self.knobs)
        if total <= JOINT_LIMIT:
            combos = list(itertools.product(*(knob.values for knob in self.knobs)))
        else:
            combos = [tuple(context.rng.choice(knob.values) for knob in self.knobs)
                      for _ in range(JOINT_LIMIT)]
        context.rng.shuffle(combos)

        def joint_score(values: tuple[KnobValue, ...]) -> float:
            return sum(self.score((k.name, v)) for k, v in zip(self.knobs, values, strict=True)
                       if v != base[k.name])

        combos.sort(key=lambda values: -joint_score(values))
        for values in combos:
            setting = {**base, **{k.name: v for k, v in zip(self.knobs, values, strict=True)}}
            changed = [k.name for k in self.knobs if setting[k.name] != base[k.name]]
            if len(changed) < 2:
                continue  # single steps came first
            yield setting, "joint move in " + self.role + ": " + ", ".join(
                f"{name} -> {setting[name]}" for name in changed)


def _reach(context: Context, base: dict[str, KnobValue],
           settings: list[dict[str, KnobValue]]) -> dict[Arm, int]:
    """How many lines of source and flags each single-step setting changes from the base."""
    def lines(setting: dict[str, KnobValue]) -> set[str]:
        candidate = context.space.instantiate(setting, threads=context.goal.threads)
        text = "\n".join(candidate.sources[name] for name in sorted(candidate.sources))
        return set(text.splitlines()) | set(candidate.flags)

    start = lines(base)
    reach = {}
    for setting in settings:
        (arm,) = [(name, value) for name, value in setting.items() if base[name] != value]
        reach[arm] = len(lines(setting) ^ start)
    return reach


def bandit_agents(knobs: tuple[Knob, ...],
                  prior: Mapping[Arm, float] | None = None) -> list[BanditAgent]:
    """One bandit-ranked agent per domain of a design space, each owning its knobs."""
    domains = sorted({knob.domain for knob in knobs})
    return [
        BanditAgent(f"builtin-{domain}", domain,
                    tuple(k for k in knobs if k.domain == domain), prior)
        for domain in domains
    ]
