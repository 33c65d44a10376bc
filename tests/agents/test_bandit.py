"""Bandit-ranked domain agents: moves that paid are tried first after a re-base."""

from __future__ import annotations

import math
import random

import pytest

from swarmfab.agents import Context
from swarmfab.agents.builtin import BanditAgent, RestartAgent, bandit_agents
from swarmfab.agents.builtin.bandit import FAILURE_REWARD, lesson_priors, verdict_reward
from swarmfab.goal import default_goal
from swarmfab.kernels import DesignSpace, KnobValue
from swarmfab.records import Candidate, Estimate, Lesson, ShapeTiming, Status, Verdict
from swarmfab.workloads import design_space

GOAL = default_goal("kda").with_overrides(threads=1)


def _verdict(candidate: Candidate, speedup: float | None) -> Verdict:
    """An accepted verdict ``speedup`` times faster than the incumbent, or a rejection."""
    if speedup is None:
        return Verdict(candidate.id, Status.REJECTED, "o does not match the reference")
    ratio = Estimate(1 / speedup, 1 / speedup, 1 / speedup)
    timing = ShapeTiming("B1 T8", "champion", Estimate(1.0, 1.0, 1.0),
                         Estimate(speedup, speedup, speedup), ratio, "faster", 5)
    return Verdict(candidate.id, Status.ACCEPTED, "", timings=(timing,))


def _context(space: DesignSpace, champion: Candidate, evaluated: set[str],
             recent: tuple[Verdict, ...] = (), seed: int = 0) -> Context:
    return Context(GOAL, space, champion, frozenset(evaluated), recent, rng=random.Random(seed))


def _tiling(space: DesignSpace) -> BanditAgent:
    return next(agent for agent in bandit_agents(space.knobs) if agent.role == "tiling")


def test_reward_is_the_log_speedup_and_failures_are_penalised(toy_space: DesignSpace) -> None:
    space = toy_space
    candidate = space.instantiate(space.default(), threads=1)
    assert abs(verdict_reward(_verdict(candidate, 2.0)) - 0.693) < 1e-3
    assert verdict_reward(_verdict(candidate, 0.5)) < 0
    assert verdict_reward(_verdict(candidate, None)) == FAILURE_REWARD


def test_moves_that_paid_are_tried_first_after_a_rebase(toy_space: DesignSpace) -> None:
    space = toy_space
    agent = _tiling(space)
    champion = space.instantiate(space.default(), threads=1)
    evaluated = {champion.id}
    steps = agent.propose(_context(space, champion, evaluated), limit=4)
    assert len(steps) == 4  # every single step of tile (8, 32) and chunk (16, 64)
    evaluated |= {c.id for c in steps}
    outcome = {"tile": 1.5, "chunk": None}  # tile moves pay, chunk moves break kernels
    verdicts = []
    for candidate in steps:
        changed = next(k for k in ("tile", "chunk") if candidate.knobs[k] != champion.knobs[k])
        speedup = outcome[changed]
        if changed == "tile" and candidate.knobs["tile"] == 8:
            speedup = 0.8  # smaller tiles are slower
        verdicts.append(_verdict(candidate, speedup))
    # another domain's change lands: the agent re-bases around the new champion
    rebased = space.instantiate({**space.default(), "parallel": "heads"}, threads=1)
    evaluated.add(rebased.id)
    ranked = agent.propose(_context(space, rebased, evaluated, tuple(verdicts)), limit=4)
    first, last = ranked[0].knobs, ranked[-1].knobs
    assert first["tile"] == 32 and first["chunk"] == rebased.knobs["chunk"]
    assert last["chunk"] != rebased.knobs["chunk"]
    assert agent.score(("tile", 32)) > agent.score(("tile", 8)) > agent.score(("chunk", 16))


def test_a_prior_orders_moves_before_any_verdict(toy_space: DesignSpace) -> None:
    space = toy_space
    tiling = tuple(k for k in space.knobs if k.domain == "tiling")
    agent = BanditAgent("builtin-tiling", "tiling", tiling, prior={("chunk", 64): 0.5})
    champion = space.instantiate(space.default(), threads=1)
    (first,) = agent.propose(_context(space, champion, {champion.id}, seed=3), limit=1)
    assert first.knobs["chunk"] == 64


def test_agents_change_only_their_own_knobs_in_a_real_space() -> None:
    space = design_space("kda")
    champion = space.instantiate(space.default(), threads=1)
    for agent in bandit_agents(space.knobs):
        own = {knob.name for knob in agent.knobs}
        proposals = agent.propose(_context(space, champion, {champion.id}), limit=6)
        assert proposals, agent.id
        for candidate in proposals:
            changed = {k for k, v in candidate.knobs.items() if champion.knobs[k] != v}
            assert changed and changed <= own


def test_restart_agent_samples_a_large_space_without_repeats() -> None:
    space = design_space("kda")
    assert space.size() > 100_000
    champion = space.instantiate(space.default(), threads=1)
    evaluated = {champion.id}
    for seed in range(5):
        batch = RestartAgent().propose(_context(space, champion, evaluated, seed=seed), limit=4)
        assert len(batch) == 4
        assert not {c.id for c in batch} & evaluated
        evaluated |= {c.id for c in batch}
    setting: dict[str, KnobValue] = dict(batch[0].knobs)
    assert set(setting) == {knob.name for knob in space.knobs}


def test_restart_agent_kicks_the_champion_before_drawing_from_the_whole_space() -> None:
    from swarmfab.agents.builtin.local_search import KICK_KNOBS

    space = design_space("kda")
    champion = space.instantiate({**space.default(), "algorithm": "recurrent"}, threads=1)
    batch = RestartAgent().propose(_context(space, champion, {champion.id}, seed=3), limit=6)
    assert len(batch) == 6
    live = {knob.name for knob in space.live_knobs(champion.knobs, threads=1)}
    assert "passes" in live and "chunk" not in live  # the recurrence ignores the chunk size
    for candidate in batch:
        changed = {k for k, v in candidate.knobs.items() if champion.knobs[k] != v}
        assert len(changed) == KICK_KNOBS and changed <= live
        assert candidate.rationale.startswith("kick: ") and candidate.parents == (champion.id,)


def _lesson(knob: str, before: KnobValue, after: KnobValue, ratio: float | None,
            similarity: float = 1.0, failures: int = 0) -> Lesson:
    effect = None if ratio is None else Estimate(ratio, ratio * 0.95, ratio * 1.05)
    return Lesson(knob, before, after, effect, pairs=0 if ratio is None else 3,
                  failures=failures, similarity=similarity)


def test_lessons_are_arm_priors_weighted_by_the_closeness_of_their_context() -> None:
    base: dict[str, KnobValue] = {"tile": 16, "chunk": 32}
    priors = lesson_priors([
        _lesson("tile", 16, 32, 0.5),  # twice as fast, same context
        _lesson("tile", 16, 8, 2.0, similarity=0.3),  # twice as slow, far away
        _lesson("chunk", 32, 64, None, failures=2),  # every such child failed
        _lesson("chunk", 64, 16, 0.5),  # a move from another base: not this one's
    ], base)
    assert priors[("tile", 32)] == pytest.approx(math.log(2))
    assert priors[("tile", 8)] == pytest.approx(-0.3 * math.log(2))
    assert priors[("chunk", 64)] == FAILURE_REWARD
    assert ("chunk", 16) not in priors


def test_a_move_lessons_say_hurts_elsewhere_is_tried_later_not_never(
    toy_space: DesignSpace,
) -> None:
    """A bandit ranks by lessons but never passes its turn or sends a move to the back
    for good: here the move that hurt at another shape is among its first four."""
    space = toy_space
    champion = space.instantiate(space.default(), threads=1)
    start = champion.knobs
    hurt = _lesson("tile", start["tile"], 8, 3.0, similarity=0.6)
    helped = _lesson("chunk", start["chunk"], 64, 0.8, similarity=0.6)
    agent, evaluated, moves = _tiling(space), {champion.id}, []
    for _ in range(4):
        context = Context(GOAL, space, champion, frozenset(evaluated), lessons=(hurt, helped),
                          rng=random.Random(0))
        [proposal] = agent.propose(context)
        evaluated.add(proposal.id)
        moves.append({k: v for k, v in proposal.knobs.items() if v != start[k]})
    assert moves[0] == {"chunk": 64}  # the helpful move first
    assert {"tile": 8} in moves  # the single steps come before any joint move
    assert moves[-1] == {"tile": 8}  # ... the one that hurt elsewhere last among them
