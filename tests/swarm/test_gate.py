"""The gate: only accepted verdicts, faster on at least one shape and slower on none, win."""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path

import pytest
import torch

from swarmfab.agents.base import Agent, Context, fresh_candidates
from swarmfab.evaluation import Evaluator, Implementation
from swarmfab.goal import Goal
from swarmfab.kernels import KnobValue
from swarmfab.knowledge import Store
from swarmfab.records import Candidate, Estimate, ShapeTiming, Status, Verdict
from swarmfab.sandbox import Limits
from swarmfab.swarm import Run, judge
from swarmfab.swarm.executors import Beside, Evaluation, LocalExecutor
from swarmfab.workloads import Case, design_space, get_workload

RATIOS = {
    "faster": Estimate(0.6, 0.55, 0.65),
    "slower": Estimate(1.3, 1.2, 1.4),
    "indistinguishable": Estimate(1.0, 0.97, 1.03),
}


def _timing(shape: str, comparison: str, ratio: Estimate | None = None) -> ShapeTiming:
    ratio = ratio or RATIOS[comparison]
    incumbent = Estimate(1e-3, 0.9e-3, 1.1e-3)
    return ShapeTiming(shape, "torch-chunked", incumbent.scaled(ratio.median), incumbent,
                       ratio, comparison, samples=20)


def _verdict(*comparisons: str, status: Status = Status.ACCEPTED) -> Verdict:
    timings = tuple(_timing(f"shape{i}", c) for i, c in enumerate(comparisons))
    return Verdict("abc123", status, "test", timings=timings)


@pytest.mark.parametrize(
    ("comparisons", "promote"),
    [
        (("faster",), True),
        (("faster", "indistinguishable"), True),
        (("faster", "faster"), True),
        (("indistinguishable",), False),
        (("indistinguishable", "indistinguishable"), False),
        (("faster", "slower"), False),
        (("slower",), False),
        ((), False),
    ],
)
def test_promotes_only_faster_somewhere_and_slower_nowhere(
    comparisons: tuple[str, ...], promote: bool
) -> None:
    decision = judge(_verdict(*comparisons))
    assert decision.promote is promote
    assert decision.reason


@pytest.mark.parametrize(
    "status", [Status.REJECTED, Status.CRASHED, Status.TIMED_OUT, Status.BUILD_FAILED]
)
def test_never_promotes_an_unverified_candidate(status: Status) -> None:
    decision = judge(_verdict("faster", status=status))
    assert not decision.promote
    assert status.value in decision.reason


def test_reasons_name_the_regressing_shape_and_the_gain() -> None:
    regress = judge(_verdict("faster", "slower"))
    assert "shape1" in regress.reason
    win = judge(_verdict("faster"))
    assert "1.67x" in win.reason  # 1 / 0.6


def test_a_median_clearly_worse_than_epsilon_blocks_promotion_even_if_the_ci_is_wide() -> None:
    noisy_regression = _timing("shape1", "indistinguishable", Estimate(1.2, 0.9, 1.6))
    verdict = Verdict("abc123", Status.ACCEPTED, "test",
                      timings=(_timing("shape0", "faster"), noisy_regression))
    assert not judge(verdict).promote


def test_a_shape_where_the_move_runs_the_same_code_is_not_judged() -> None:
    """Its reading is a difference between two processes: it neither crowns nor blocks."""
    assert not judge(_verdict("indistinguishable", "faster"), same_code={"shape1"}).promote
    assert judge(_verdict("faster", "slower"), same_code={"shape1"}).promote
    alone = judge(_verdict("faster", "faster"), same_code={"shape0", "shape1"})
    assert not alone.promote and "changes no code" in alone.reason
    assert judge(_verdict("faster", "slower")).promote is False  # as before without it


# -- a move that runs the champion's code everywhere is not evaluated -----------------------
class _Proposes(Agent):
    """Proposes the given settings, in order, each once."""

    def __init__(self, *settings: dict[str, KnobValue]):
        super().__init__("scripted", "algorithm")
        self.settings = list(settings)

    def propose(self, context: Context, limit: int = 1) -> list[Candidate]:
        while self.settings:
            found = fresh_candidates(context, [(self.settings.pop(0), "scripted")],
                                     agent=self.id)
            if found:
                return found
        return []


class _Holds(LocalExecutor):
    """Takes submissions and never runs them."""

    def __init__(self, evaluator: Evaluator, workers: int | None = 2):
        super().__init__(evaluator, workers)
        self.submitted: list[Candidate] = []

    def submit(self, candidate: Candidate, incumbents: dict[str, Implementation],
               extra_cases: Sequence[Case], beside: Beside | None = None
               ) -> Future[Evaluation]:
        self.submitted.append(candidate)
        return Future()


@pytest.mark.parametrize(("T", "skipped"), [(1, True), (16, False)])
def test_a_move_running_the_champions_code_on_every_target_is_never_evaluated(
        tmp_path: Path, T: int, skipped: bool) -> None:
    goal = Goal.model_validate({"workload": "kda", "budget": "300s", "threads": 1,
                                "shapes": [{"B": 2, "T": T, "H": 2, "K": 16, "V": 16}]})
    space = design_space("kda")
    champion = {**space.default(), "algorithm": "recurrent", "decode": "direct"}
    tile_move = {**champion, "token_group": 8 if champion["token_group"] != 8 else 4}
    real_move = {**champion, "decode": "tiles"}
    evaluator = Evaluator(get_workload("kda"), goal.target_shapes(), tmp_path / "cache",
                          threads=1, tolerances=get_workload("kda").tolerances(torch.float32),
                          limits=Limits(wall_s=60))
    lines: list[str] = []
    run = Run(goal, Store(tmp_path / "x.db"), evaluator, space,
              [_Proposes(tile_move, real_move)], tmp_path, log=lines.append)
    run.champion = space.instantiate(champion, threads=1)
    executor = _Holds(evaluator)
    run._fill(executor, {}, deadline=time.monotonic() + 60)
    tile = space.instantiate(tile_move, threads=1)
    assert [c.knobs for c in executor.submitted] == ([real_move] if skipped
                                                     else [tile_move, real_move])
    assert (tile.id in run.blackboard.judged()) is skipped
    assert any("runs the champion's code on every target shape" in line
               for line in lines) is skipped


def test_an_agent_marked_first_keeps_its_turn_while_it_proposes(tmp_path: Path) -> None:
    goal = Goal.model_validate({"workload": "kda", "budget": "300s", "threads": 1,
                                "shapes": [{"B": 1, "T": 16, "H": 2, "K": 16, "V": 16}]})
    space = design_space("kda")
    champion = {**space.default(), "algorithm": "recurrent"}
    moves = [{**champion, "tile_v": tile} for tile in (8, 16, 64, 128, 32)]
    moves[-1] = {**champion, "token_group": 2}
    first = _Proposes(moves[1], moves[2])
    first.first = True
    evaluator = Evaluator(get_workload("kda"), goal.target_shapes(), tmp_path / "cache",
                          threads=1, tolerances=get_workload("kda").tolerances(torch.float32),
                          limits=Limits(wall_s=60))
    agents = [_Proposes(moves[0], moves[4]), first, _Proposes(moves[3])]
    run = Run(goal, Store(tmp_path / "x.db"), evaluator, space, agents, tmp_path,
              log=lambda line: None)
    run.champion = space.instantiate(champion, threads=1)
    executor = _Holds(evaluator, workers=5)
    run._fill(executor, {}, deadline=time.monotonic() + 60)
    # the first agent's two moves one after the other, then the turn goes on
    assert [c.knobs for c in executor.submitted] == [moves[0], moves[1], moves[2], moves[3],
                                                     moves[4]]
