"""Until a run has a champion it keeps no time for the closing table: an evaluation that
may end too late for one times the closing baselines beside its candidate, and if it is
crowned, its own figures stand in for the table."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
import torch

from swarmfab.agents.builtin import RestartAgent, domain_agents
from swarmfab.evaluation import Evaluator, Implementation
from swarmfab.goal import Goal
from swarmfab.knowledge import Store
from swarmfab.measure import TimingPolicy
from swarmfab.records import Candidate, Status
from swarmfab.sandbox import Limits
from swarmfab.swarm import Run, run
from swarmfab.workloads import Shape, design_space, get_workload

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
QUICK = TimingPolicy(min_rounds=3, max_rounds=8, max_seconds=1.0)


def _evaluator(tmp_path: Path, shapes: list[Shape]) -> Evaluator:
    kda = get_workload("kda")
    return Evaluator(kda, shapes, tmp_path / "cache", threads=1,
                     tolerances=kda.tolerances(torch.float32), limits=Limits(wall_s=120),
                     policy=QUICK)


@needs_gcc
@pytest.mark.slow
def test_baselines_beside_the_candidate_are_timed_in_its_rounds_not_judged(
        tmp_path: Path, template: Candidate) -> None:
    evaluator = _evaluator(tmp_path, [Shape(B=1, T=64, H=2, HV=2, K=16, V=16)])
    evaluator.prepare()
    (label,) = [case.shape.label for case in evaluator.targets]
    chunked = Implementation("torch-chunked", baseline="torch-chunked")
    verdict = evaluator.evaluate(template, {label: chunked},
                                 beside={label: ["torch-recurrent", "torch-chunked"]})
    assert verdict.status is Status.ACCEPTED, verdict.reason
    (timing,) = verdict.timings
    assert timing.incumbent == "torch-chunked"
    assert set(timing.beside_s) == set(timing.beside_ratio) == {"torch-recurrent"}
    recurrent = timing.beside_s["torch-recurrent"]
    assert 0 < recurrent.low <= recurrent.median <= recurrent.high
    # candidate over baseline, in the same rounds: consistent with the two medians
    ratio = timing.beside_ratio["torch-recurrent"].median
    assert 0.5 < ratio / (timing.candidate_s.median / recurrent.median) < 2.0
    plain = evaluator.evaluate(template, {label: chunked})
    assert plain.timings[0].beside_s == {}


@needs_gcc
@pytest.mark.slow
def test_a_champion_crowned_too_late_for_a_closing_table_keeps_its_own_figures(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A closing table that would take the whole budget: the first evaluation is late from
    the start, is timed beside the baselines, and its figures become the run's."""
    goal = Goal.model_validate({"workload": "kda", "budget": "90s", "threads": 1, "seed": 1,
                                "shapes": [{"B": 1, "T": 64, "H": 2, "K": 16, "V": 16}],
                                "max_evaluations": 1})
    monkeypatch.setattr(run, "closing_reserve", lambda calibration, inputs_s: 600.0)
    space = design_space("kda")
    lines: list[str] = []
    started = time.monotonic()
    swarm = Run(goal, Store(tmp_path / "x.db"), _evaluator(tmp_path, goal.target_shapes()),
                space, domain_agents(space.knobs), tmp_path, log=lines.append,
                fallback=RestartAgent())
    result = swarm.execute()
    assert time.monotonic() - started <= goal.budget_s + swarm.budget.grace_s
    assert result.champion is not None, lines
    assert any("an evaluation that may end later times its fastest baselines" in line
               for line in lines), lines
    assert any("the figures are from the champion's evaluation" in line for line in lines)
    (table,) = result.final
    assert set(table.seconds) == {"champion", *swarm.calibration.fastest.values()}
    timing = swarm.champion_verdict.timings[0] if swarm.champion_verdict else None
    assert timing is not None and table.seconds["champion"] == timing.candidate_s
    assert not any("search over: timing the champion" in line for line in lines)
