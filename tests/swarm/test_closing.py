"""The closing table fits what is left of the budget, and never drops the baseline the
champion's speedup is quoted against."""

from __future__ import annotations

import math

from swarmfab.evaluation import Implementation
from swarmfab.measure import CONFIRMATION
from swarmfab.records import Estimate, ShapeTiming, Status, Verdict
from swarmfab.swarm.budget import Budget
from swarmfab.swarm.closing import beside, closing_reserve, plan_closing, stand_in, summarise
from swarmfab.swarm.setup import FINAL_MIN_ROUNDS, Calibration

CALIBRATION = Calibration(
    ("torch-recurrent", "torch-chunked", "torch-compile"),
    {"big": "torch-recurrent", "small": "torch-chunked"},
    {"big": {"torch-recurrent": 0.4, "torch-chunked": 1.0, "torch-compile": math.inf},
     "small": {"torch-recurrent": 0.02, "torch-chunked": 0.01, "torch-compile": math.inf}},
    {"big": 0.3, "small": 0.01},
)
NAMES = ["torch-recurrent", "torch-chunked", "torch-compile"]
CHAMPION = {"big": 0.02, "small": 0.001}


def test_with_time_to_spare_every_baseline_is_timed_under_the_full_policy() -> None:
    plan = plan_closing(CALIBRATION, CHAMPION, NAMES, left_s=600.0)
    assert plan.baselines == NAMES and not plan.trimmed
    assert plan.only == {"big": NAMES, "small": NAMES}
    assert all(p.min_rounds == CONFIRMATION.min_rounds for p in plan.policies.values())
    assert all(p.warmup_calls == CONFIRMATION.warmup_calls for p in plan.policies.values())


def test_short_of_time_the_rounds_shrink_and_the_slow_shape_gets_the_larger_share() -> None:
    plan = plan_closing(CALIBRATION, CHAMPION, NAMES, left_s=20.0)
    big, small = plan.policies["big"], plan.policies["small"]
    assert not plan.trimmed
    assert FINAL_MIN_ROUNDS <= big.min_rounds < CONFIRMATION.min_rounds
    assert big.warmup_calls == 0
    assert big.max_seconds > small.max_seconds
    # chunked (1 s) is timed once a round, the others after an untimed call
    round_big = 1.0 + 2 * (0.4 + 0.02)
    fixed = 2 * 1.0 + 0.3 + 0.01 + (0.4 + 1.0 + 0.02) + (0.02 + 0.01 + 0.001)  # jobs, inputs
    assert big.min_rounds * round_big <= 20.0 - fixed


def test_when_even_the_fewest_rounds_do_not_fit_each_shape_keeps_its_fastest() -> None:
    plan = plan_closing(CALIBRATION, CHAMPION, NAMES, left_s=3.0)
    assert plan.trimmed
    assert plan.only == {"big": ["torch-recurrent"], "small": ["torch-chunked"]}
    assert plan.baselines == ["torch-recurrent", "torch-chunked"]
    assert all(p.min_rounds == FINAL_MIN_ROUNDS for p in plan.policies.values())


def test_the_search_ends_early_enough_for_the_closing_table() -> None:
    reserve = closing_reserve(CALIBRATION, CALIBRATION.inputs_s)
    # per shape: a job, the inputs, a warm-up call and the fewest rounds of the fastest
    big = 1.0 + 0.3 + 0.4 + FINAL_MIN_ROUNDS * 2 * 0.4
    small = 1.0 + 0.01 + 0.01 + FINAL_MIN_ROUNDS * 2 * 0.01
    assert math.isclose(reserve, big + small)
    roomy, tight = Budget(0.0, 600.0, reserve), Budget(0.0, 20.0, reserve)
    assert roomy.search_end == 0.8 * 600 and roomy.hard_end == 0.9 * 600
    assert tight.search_end < 0.8 * 20 and tight.hard_end <= 20 - reserve


COMPILED = Calibration(
    ("torch-eager", "torch-compile"), {"p": "torch-eager"},
    {"p": {"torch-eager": 0.010, "torch-compile": 0.002}}, {"p": 0.0},
    compile_s={"p": 20.0}, compiling=frozenset({"torch-compile"}))


def test_where_implementations_compile_the_reserve_pays_for_compiling_them() -> None:
    # the champion and torch.compile each compile once: twice the measured job's time
    assert 40.0 < closing_reserve(COMPILED, {}) < 42.0
    without = Calibration(COMPILED.names, COMPILED.fastest, COMPILED.seconds, {})
    assert closing_reserve(without, {}) < 2.0


def test_short_of_time_the_fastest_of_all_baselines_stays_beside_the_incumbent() -> None:
    plan = plan_closing(COMPILED, {"p": 0.001}, ["torch-eager", "torch-compile"], left_s=30.0)
    assert plan.trimmed and plan.only == {"p": ["torch-compile", "torch-eager"]}


def _verdict(incumbent: str, beside_s: dict[str, float]) -> Verdict:
    """A candidate at 1 ms against ``incumbent`` at 10 ms, others timed beside it."""
    def flat(value: float) -> Estimate:
        return Estimate(value, value * 0.9, value * 1.1)

    timing = ShapeTiming(
        "p", incumbent, flat(0.001), flat(0.010), flat(0.1), "faster", 7, 0.5,
        beside_s={name: flat(t) for name, t in beside_s.items()},
        beside_ratio={name: flat(0.001 / t) for name, t in beside_s.items()})
    return Verdict("c", Status.ACCEPTED, "verified", (), (timing,))


def test_a_late_evaluation_times_the_closing_baselines_the_incumbent_is_not() -> None:
    eager = {"p": Implementation("torch-eager", baseline="torch-eager")}
    assert beside(COMPILED, eager) == {"p": ["torch-compile"]}
    champion = {"p": Implementation("champion")}
    assert beside(COMPILED, champion) == {"p": ["torch-compile", "torch-eager"]}


def test_a_champion_timed_beside_the_closing_baselines_has_its_own_closing_figures() -> None:
    verdict = _verdict("torch-eager", {"torch-compile": 0.002})
    (table,) = stand_in(verdict, COMPILED, "warm") or []
    assert set(table.seconds) == {"champion", "torch-eager", "torch-compile"}
    assert table.ratio_to_reference["torch-eager"].median == 10.0
    assert math.isclose(table.ratio_to_reference["torch-compile"].median, 2.0)
    assert table.roofline_fraction("champion") == 0.5
    (shape,) = summarise(None, [table], None)["shapes"]
    assert shape["fastest_baseline"] == "torch-compile"
    assert math.isclose(shape["speedups"]["torch-compile"][0], 2.0)


def test_an_evaluation_without_the_fastest_baselines_cannot_stand_in() -> None:
    assert stand_in(_verdict("torch-eager", {}), COMPILED, "warm") is None
    # timed against an earlier champion: that is no baseline of the table
    assert stand_in(_verdict("champion", {"torch-compile": 0.002}), COMPILED, "warm") is None
    both = _verdict("champion", {"torch-compile": 0.002, "torch-eager": 0.01})
    (table,) = stand_in(both, COMPILED, "warm") or []
    assert set(table.seconds) == {"champion", "torch-eager", "torch-compile"}
    assert stand_in(None, COMPILED, "warm") is None
