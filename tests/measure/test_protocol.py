"""The benchmark protocol on calls of known relative cost.

Identical work must come out "indistinguishable"; work made 1.3x longer must be measured
near 1.3x and called "slower". The calls are pure Python loops, so the ratio is set by
the instruction count, whatever else the machine is doing.
"""

from __future__ import annotations

import pytest

from swarmfab.measure import TimingPolicy, classify, paired_ratio, time_interleaved

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
