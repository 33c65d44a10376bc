"""The benchmark protocol on calls of known relative cost.

Identical work must come out "indistinguishable"; work made 1.3x longer must be measured
near 1.3x and called "slower". The calls are pure Python loops, so the ratio is set by
the instruction count, whatever else the machine is doing.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable

import pytest

from swarmfab.measure import TimingPolicy, classify, paired_ratio, time_interleaved

# the protocol itself: timed at full size, not the suite's test size (tests/conftest.py)
pytestmark = pytest.mark.full_timing_protocol

STEPS = 40_000
POLICY = TimingPolicy(min_rounds=15, max_rounds=80, max_seconds=8.0, target_width=0.01)


def _work(steps: int) -> float:
    total = 0.0
    for i in range(steps):
        total += i * 0.5
    return total


# timed beside another test's load, identical calls measured 1.19x [1.11, 1.33] apart
@pytest.mark.exclusive
def test_identical_calls_are_indistinguishable_and_a_slowed_one_is_measured() -> None:
    samples = time_interleaved(
        {
            "reference": lambda: _work(STEPS),
            "same": lambda: _work(STEPS),
            "slowed": lambda: _work(int(STEPS * 1.3)),
        },
        POLICY,
        reference="reference",
    )
    same = paired_ratio(samples["same"], samples["reference"])
    slowed = paired_ratio(samples["slowed"], samples["reference"])
    assert classify(same, epsilon=0.02) == "indistinguishable", same
    assert classify(slowed, epsilon=0.02) == "slower", slowed
    assert abs(slowed.median - 1.3) < 0.08, slowed
    assert slowed.low <= slowed.median <= slowed.high


class _NoisyWatch:
    """A stopwatch whose calls return their own time, with 10% uniform noise (seeded):
    the protocol's stopping rule, without a clock."""

    cold = False

    def __init__(self) -> None:
        self.rng = random.Random(7)

    def evict(self, round_index: int) -> None:
        pass

    def seconds(self, call: Callable[[], object], repeats: int) -> float:
        return float(call()) * (1 + 0.1 * self.rng.random())  # type: ignore[arg-type]


@pytest.mark.parametrize(("candidate_s", "decided_sooner"), [(2e-5, True), (0.9e-3, False)])
def test_a_ratio_of_many_times_is_settled_sooner_where_the_policy_allows(
    candidate_s: float, decided_sooner: bool,
) -> None:
    strict = TimingPolicy(min_rounds=5, max_rounds=200, max_seconds=60.0, target_width=0.02,
                          min_sample_s=0.0)
    lenient = dataclasses.replace(strict, clear_factor=2.0, clear_width=0.1)
    rounds = {}
    for name, policy in (("strict", strict), ("lenient", lenient)):
        samples = time_interleaved({"incumbent": lambda: 1e-3, "candidate": lambda: candidate_s},
                                   policy, reference="incumbent", stopwatch=_NoisyWatch())
        rounds[name] = len(samples["candidate"])
        ratio = paired_ratio(samples["candidate"], samples["incumbent"])
        assert ratio.low <= candidate_s / 1e-3 * 1.1 and ratio.high >= candidate_s / 1e-3 / 1.1
    if decided_sooner:  # 50x apart: 10% is enough, and reached in the first rounds
        assert rounds["lenient"] == strict.min_rounds < rounds["strict"], rounds
    else:  # 0.9x: held to 2% either way
        assert rounds["lenient"] == rounds["strict"] > strict.min_rounds, rounds
