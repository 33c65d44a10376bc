"""Built-in agents: one per domain, local moves in their own knobs, restarts over the space."""

from __future__ import annotations

import itertools
import random

import pytest

from swarmfab.agents import Context
from swarmfab.agents.builtin import LocalSearchAgent, RestartAgent, domain_agents
from swarmfab.goal import Goal, default_goal
from swarmfab.kernels import DesignSpace, KnobValue
from swarmfab.records import Candidate


@pytest.fixture
def goal() -> Goal:
    return default_goal("kda").with_overrides(threads=1)


@pytest.fixture
def space(toy_space: DesignSpace) -> DesignSpace:
    """Every knob of the toy space reaches the source (a real workload's space is too
    large to enumerate, and some of its knobs only matter to one template)."""
    return toy_space


def _off_default(space: DesignSpace) -> dict[str, KnobValue]:
    """A champion setting away from the defaults (so it is not what a fresh agent starts at)."""
    return {knob.name: knob.values[-1] if knob.default != knob.values[-1] else knob.values[0]
            for knob in space.knobs}


def _context(goal: Goal, space: DesignSpace, champion: Candidate | None,
             evaluated: set[str], seed: int = 0) -> Context:
    return Context(goal, space, champion, frozenset(evaluated), rng=random.Random(seed))


def _drain(agent: LocalSearchAgent | RestartAgent, goal: Goal, space: DesignSpace,
           champion: Candidate | None, evaluated: set[str], limit: int = 1,
           max_calls: int = 500) -> list[Candidate]:
    """Ask ``agent`` until it returns nothing, marking every proposal evaluated."""
    proposed: list[Candidate] = []
    for call in range(max_calls):
        batch = agent.propose(_context(goal, space, champion, evaluated, seed=call), limit)
        assert len(batch) <= limit
        for candidate in batch:
            assert candidate.id not in evaluated, "re-proposed an evaluated candidate"
            evaluated.add(candidate.id)
        if not batch:
            return proposed
        proposed.extend(batch)
    raise AssertionError(f"{agent!r} never ran out of proposals")


def test_one_agent_per_domain_owning_exactly_its_knobs(space: DesignSpace) -> None:
    agents = domain_agents(space.knobs)
    assert sorted(agent.role for agent in agents) == space.domains
    assert len({agent.id for agent in agents}) == len(agents)
    for agent in agents:
        assert agent.knobs
        assert all(knob.domain == agent.role for knob in agent.knobs)
    owned = sorted(knob.name for agent in agents for knob in agent.knobs)
    assert owned == sorted(knob.name for knob in space.knobs)


def test_never_proposes_an_evaluated_candidate(goal: Goal, space: DesignSpace) -> None:
    champion = space.instantiate(_off_default(space), threads=1)
    for agent in domain_agents(space.knobs):
        evaluated = {champion.id}
        # pre-evaluate what the agent would propose first, to make it work around them
        first = agent.propose(_context(goal, space, champion, evaluated), limit=2)
        evaluated |= {candidate.id for candidate in first}
        proposals = _drain(agent, goal, space, champion, evaluated, limit=2)
        assert not {c.id for c in first} & {c.id for c in proposals}
        assert champion.id not in {c.id for c in proposals}


def test_proposals_change_only_the_agents_own_knobs(goal: Goal, space: DesignSpace) -> None:
    setting = _off_default(space)
    champion = space.instantiate(setting, threads=1, agent="earlier")
    for agent in domain_agents(space.knobs):
        own = {knob.name for knob in agent.knobs}
        proposals = _drain(agent, goal, space, champion, {champion.id})
        assert proposals
        for candidate in proposals:
            changed = {name for name in setting if candidate.knobs[name] != setting[name]}
            assert changed, "proposed the champion itself"
            assert changed <= own, f"{agent.id} changed {changed - own}"
            assert candidate.agent == agent.id
            assert candidate.parents == (champion.id,)
            assert candidate.rationale
        # and it explores its whole neighbourhood before giving up
        reachable = 1
        for knob in agent.knobs:
            reachable *= len(knob.values)
        assert len({c.id for c in proposals}) == reachable - 1


def test_without_a_champion_search_starts_from_the_space_defaults(
    goal: Goal, space: DesignSpace
) -> None:
    agent = domain_agents(space.knobs)[0]
    (first,) = agent.propose(_context(goal, space, None, set()), limit=1)
    assert first.knobs == space.default()
    assert first.parents == ()


def test_single_steps_come_before_joint_moves(goal: Goal, space: DesignSpace) -> None:
    setting = _off_default(space)
    champion = space.instantiate(setting, threads=1)
    for agent in domain_agents(space.knobs):
        steps = sum(len(knob.neighbours(setting[knob.name])) for knob in agent.knobs)
        proposals = agent.propose(_context(goal, space, champion, {champion.id}), limit=steps)
        assert len(proposals) == steps
        for candidate in proposals:
            changed = [k for k in agent.knobs if candidate.knobs[k.name] != setting[k.name]]
            assert len(changed) == 1, f"{agent.id}: {candidate.rationale}"
            (knob,) = changed
            assert candidate.knobs[knob.name] in knob.neighbours(setting[knob.name])


def test_proposals_are_reproducible_for_a_seed(goal: Goal, space: DesignSpace) -> None:
    champion = space.instantiate(_off_default(space), threads=1)
    agent = domain_agents(space.knobs)[-1]
    one = agent.propose(_context(goal, space, champion, {champion.id}, seed=4), limit=3)
    two = agent.propose(_context(goal, space, champion, {champion.id}, seed=4), limit=3)
    assert [c.id for c in one] == [c.id for c in two]


def test_restart_agent_covers_the_whole_space_then_stops(goal: Goal, space: DesignSpace) -> None:
    champion = space.instantiate(space.default(), threads=1)
    proposals = _drain(RestartAgent(), goal, space, champion, {champion.id}, limit=7)
    settings = {tuple(c.knobs[k.name] for k in space.knobs) for c in proposals}
    every = set(itertools.product(*(knob.values for knob in space.knobs)))
    assert len(proposals) == space.size() - 1
    assert settings == every - {tuple(champion.knobs[k.name] for k in space.knobs)}
    assert all(c.agent == "builtin-restart" for c in proposals)


def test_a_champion_from_another_domain_rebases_the_agent(goal: Goal, space: DesignSpace) -> None:
    agents = {agent.role: agent for agent in domain_agents(space.knobs)}
    mine, other = agents[space.domains[0]], agents[space.domains[1]]
    first = space.instantiate(space.default(), threads=1)
    before = mine.propose(_context(goal, space, first, {first.id}), limit=1)[0]
    # another domain's change lands: a new champion differing in that domain's knobs
    changed = dict(space.default())
    knob = other.knobs[0]
    changed[knob.name] = next(v for v in knob.values if v != knob.default)
    crowned = space.instantiate(changed, threads=1, parents=(first.id,), agent=other.id)
    after = mine.propose(_context(goal, space, crowned, {first.id, crowned.id}), limit=1)[0]
    assert before.knobs[knob.name] == knob.default and before.parents == (first.id,)
    assert after.knobs[knob.name] == changed[knob.name], "still searching around the old champion"
    assert after.parents == (crowned.id,)
    differs = {name for name in after.knobs if after.knobs[name] != crowned.knobs[name]}
    assert differs and differs <= {k.name for k in mine.knobs}
