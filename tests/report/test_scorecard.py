"""The suite's scorecard: fast_p and geometric means from the runs' closing tables."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from swarmfab.report.scorecard import ProblemScore, Scorecard, score_run, summary_line


def _result(champion: bool) -> SimpleNamespace:
    crowned = SimpleNamespace(knobs={"engine": "inductor"}) if champion else None
    return SimpleNamespace(run_id="r", evaluations=3, champion=crowned)


def _summary(over_eager: float, over_compile: float) -> dict[str, object]:
    return {"shapes": [{"shape": "n=64", "seconds": {"champion": [1.0, 0.9, 1.1]},
                        "speedups": {"torch-eager": [over_eager, over_eager * 0.9,
                                                     over_eager * 1.1],
                                     "torch-compile": [over_compile, 0.0, 9.0]}}]}


def test_a_champion_is_scored_from_the_closing_table() -> None:
    score = score_run("p", "n=64", _result(True), _summary(2.5, 1.2), None)
    assert score.verified and score.over_eager == [2.5, 2.25, 2.75]
    assert score.over_compile == [1.2, 0.0, 9.0]


def test_a_closing_table_without_torch_compile_chains_the_calibration_ratio() -> None:
    summary = _summary(2.5, 1.2)
    del summary["shapes"][0]["speedups"]["torch-compile"]  # type: ignore[index]
    calibration = {"n=64": {"torch-eager": 0.010, "torch-compile": 0.012}}
    score = score_run("p", "n=64", _result(True), summary, calibration)
    assert score.over_compile is not None and score.over_compile[0] == pytest.approx(3.0)
    assert math.isnan(score.over_compile[1])  # no interval for a chained figure
    assert score_run("p", "n=64", _result(True), summary, None).over_compile is None


def test_without_a_champion_eager_is_the_answer_and_not_fast() -> None:
    calibration = {"n=64": {"torch-eager": 0.010, "torch-compile": 0.005}}
    score = score_run("p", "n=64", _result(False), None, calibration)
    assert not score.verified and score.over_eager == [1.0, 1.0, 1.0]
    assert score.over_compile is not None and score.over_compile[0] == pytest.approx(0.5)


def test_fast_p_counts_verified_answers_faster_than_eager_by_more_than_p() -> None:
    scores = [score_run("a", "", _result(True), _summary(3.0, 1.5), None),
              score_run("b", "", _result(True), _summary(1.2, 0.8), None),
              score_run("c", "", _result(False), None,
                        {"s": {"torch-eager": 1.0, "torch-compile": 2.0}}),
              ProblemScore("d", detail="failed to import")]
    card = Scorecard(scores)
    assert card.fast == {"fast_0": 0.5, "fast_1": 0.5, "fast_1.5": 0.25, "fast_2": 0.25}
    assert card.geomean("over_eager") == pytest.approx((3.0 * 1.2 * 1.0) ** (1 / 3))
    assert card.geomean("over_compile") == pytest.approx((1.5 * 0.8 * 2.0) ** (1 / 3))
    data = card.to_dict()
    assert data["verified"] == 2 and data["total"] == 4
    assert "2/4 problems with a verified champion" in summary_line(card)
    assert math.isnan(scores[2].seconds["torch-eager"][1])  # no CI from a calibration
