"""The closing table fits what is left of the budget, and never drops the baseline the
champion's speedup is quoted against."""

from __future__ import annotations

import math

from swarmfab.measure import CONFIRMATION
from swarmfab.swarm.closing import plan_closing
from swarmfab.swarm.setup import FINAL_MIN_ROUNDS, Calibration

CALIBRATION = Calibration(
    ("torch-recurrent", "torch-chunked", "torch-compile"),
    {"big": "torch-recurrent", "small": "torch-chunked"},
    {"big": {"torch-recurrent": 0.4, "torch-chunked": 1.0, "torch-compile": math.inf},
     "small": {"torch-recurrent": 0.02, "torch-chunked": 0.01, "torch-compile": math.inf}},
)
NAMES = ["torch-recurrent", "torch-chunked", "torch-compile"]
CHAMPION = {"big": 0.02, "small": 0.001}


def test_with_time_to_spare_every_baseline_is_timed_under_the_full_policy() -> None:
    plan = plan_closing(CALIBRATION, CHAMPION, NAMES, left_s=600.0)
    assert plan.baselines == NAMES and plan.dropped == []
    assert all(p.min_rounds == CONFIRMATION.min_rounds for p in plan.policies.values())
    assert all(p.warmup_calls == CONFIRMATION.warmup_calls for p in plan.policies.values())


def test_short_of_time_the_rounds_shrink_and_the_slow_shape_gets_the_larger_share() -> None:
    plan = plan_closing(CALIBRATION, CHAMPION, NAMES, left_s=20.0)
    big, small = plan.policies["big"], plan.policies["small"]
    assert FINAL_MIN_ROUNDS <= big.min_rounds < CONFIRMATION.min_rounds
    assert big.warmup_calls == 0
    assert big.max_seconds > small.max_seconds
    # rounds that fit: the planned time stays within what is left
    round_big = 2 * (0.4 + 1.0 + 0.02)
    assert big.min_rounds * round_big <= 20.0


def test_when_even_the_fewest_rounds_do_not_fit_only_the_fastest_baselines_stay() -> None:
    plan = plan_closing(CALIBRATION, CHAMPION, NAMES, left_s=3.0)
    assert plan.baselines == ["torch-recurrent", "torch-chunked"]  # each fastest somewhere
    assert plan.dropped == ["torch-compile"]
    assert all(p.min_rounds == FINAL_MIN_ROUNDS for p in plan.policies.values())
