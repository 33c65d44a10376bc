"""The gate: only accepted verdicts, faster on at least one shape and slower on none, win."""

from __future__ import annotations

import pytest

from swarmfab.records import Estimate, ShapeTiming, Status, Verdict
from swarmfab.swarm import judge

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
