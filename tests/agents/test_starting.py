"""The starting-points agent: a space's named moves, each once, over the champion."""

from __future__ import annotations

import dataclasses
import random

import pytest

from swarmfab.agents import Context
from swarmfab.agents.builtin import StartingPointsAgent
from swarmfab.goal import default_goal
from swarmfab.kernels import DesignSpace
from swarmfab.kernels._host import full_width_isa
from swarmfab.serving.recipe import engine_space
from swarmfab.workloads import design_space


def _context(space: DesignSpace, champion_knobs: dict[str, object] | None,
             evaluated: frozenset[str] = frozenset()) -> Context:
    goal = default_goal("kda").with_overrides(threads=1)
    champion = None if champion_knobs is None else space.instantiate(
        champion_knobs, threads=1, agent="champion")
    return Context(goal, space, champion, evaluated, rng=random.Random(0))


def test_each_starting_point_is_proposed_once_over_the_champion(
        toy_space: DesignSpace) -> None:
    space = dataclasses.replace(toy_space, starting=(
        ({"algorithm": "b"}, "the other algorithm"), ({"tile": 64, "chunk": 64}, "big")))
    champion = {**space.default(), "parallel": "heads"}
    agent = StartingPointsAgent()
    evaluated: set[str] = set()
    proposed = []
    while candidates := agent.propose(_context(space, champion, frozenset(evaluated))):
        (candidate,) = candidates
        evaluated.add(candidate.id)
        proposed.append(candidate)
    assert [c.knobs for c in proposed] == [{**champion, "algorithm": "b"},
                                           {**champion, "tile": 64, "chunk": 64}]
    assert proposed[0].rationale == "starting point: the other algorithm"
    assert all(c.agent == "builtin-starting" and len(c.parents) == 1 for c in proposed)


def test_the_next_starting_point_waits_for_the_last_ones_verdict(
        toy_space: DesignSpace) -> None:
    space = dataclasses.replace(toy_space, starting=(
        ({"algorithm": "b"}, "the other algorithm"), ({"tile": 64}, "big tiles")))
    agent = StartingPointsAgent()
    assert agent.first  # the run asks it before the domain agents
    (first,) = agent.propose(_context(space, space.default()))
    busy = dataclasses.replace(_context(space, space.default(), frozenset({first.id})),
                               in_flight=frozenset({first.id}))
    assert agent.propose(busy) == []  # in flight: the next move would miss its verdict
    # crowned meanwhile: the next move is made over the new champion
    (second,) = agent.propose(_context(space, first.knobs, frozenset({first.id})))
    assert second.knobs == {**first.knobs, "tile": 64} and second.parents != ()


def test_a_starting_point_equal_to_the_champion_is_not_proposed(
        toy_space: DesignSpace) -> None:
    space = dataclasses.replace(toy_space, starting=(({"algorithm": "b"}, "b"),))
    champion = space.instantiate({**space.default(), "algorithm": "b"}, threads=1)
    assert StartingPointsAgent().propose(_context(space, champion.knobs,
                                                  frozenset({champion.id}))) == []
    # without a champion the moves apply to the defaults
    (candidate,) = StartingPointsAgent().propose(_context(space, None))
    assert candidate.knobs == champion.knobs and candidate.parents == ()


def test_over_a_champion_no_setting_renders_the_moves_apply_to_the_defaults(
        toy_space: DesignSpace) -> None:
    space = dataclasses.replace(toy_space, starting=(({"algorithm": "b"}, "b"),))
    edited = dataclasses.replace(space.instantiate(space.default(), threads=1),
                                 sources={"kernel.c": "/* an LLM's edit */"}, knobs={})
    context = dataclasses.replace(_context(space, None), champion=edited)
    (candidate,) = StartingPointsAgent().propose(context)
    assert candidate.knobs == {**space.default(), "algorithm": "b"}
    assert candidate.parents == (edited.id,)


def test_the_kernel_spaces_start_with_the_recurrence() -> None:
    for workload in ("kda", "gdn"):
        space = design_space(workload)
        (move, why), *others = space.starting
        assert move == {"algorithm": "recurrent"} and space.default()["algorithm"] == "chunked"
        assert "recurrence" in why
        # then, where this host's compiler tunes it for narrower vectors than it has,
        # full-width ones; where fresh pages are costly here, the outputs' pages mapped
        # by the call, then kept mapped by malloc
        wide = full_width_isa()
        wider = [{"isa": wide}] if wide else []
        pages = [{"output_pages": "populated"}, {"allocator": "retain"}]
        assert [move for move, _ in others] in (wider, [*wider, *pages])


def test_a_starting_point_outside_the_space_is_refused(toy_space: DesignSpace) -> None:
    with pytest.raises(ValueError, match="tile"):
        dataclasses.replace(toy_space, starting=(({"tile": 7}, "no such tile"),))


def test_the_engine_space_starts_with_the_factory_s_kda_kernels() -> None:
    ((move, why),) = engine_space(2, frozenset()).starting
    assert move == {"kda_prefill": "c-recurrent", "kda_decode": "c"} and "kernel factory" in why
    # where the store holds a kernel run's champion for a slot, that slot takes it
    ((move, _),) = engine_space(2, frozenset(), kda={"decode": {"algorithm": "recurrent"}}
                                ).starting
    assert move == {"kda_prefill": "c-recurrent", "kda_decode": "champion"}
