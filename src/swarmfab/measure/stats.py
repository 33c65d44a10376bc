"""Statistics for timings: medians with bootstrap confidence intervals, paired ratios.

Timings on shared machines drift and have heavy right tails, so everything here is
built on medians, and a speedup is the median of *paired* ratios (candidate and
incumbent timed back to back in the same round), which cancels slow drift.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from swarmfab.records import Estimate

__all__ = ["classify", "median_ci", "paired_ratio"]

CONFIDENCE = 0.95
_RESAMPLES = 2000


def median_ci(samples: Sequence[float], seed: int = 0) -> Estimate:
    """The median and its 95% bootstrap (percentile) confidence interval."""
    data = np.asarray(samples, dtype=np.float64)
    if data.size == 0:
        raise ValueError("no samples")
    if data.size == 1:
        value = float(data[0])
        return Estimate(value, value, value)
    rng = np.random.default_rng(seed)
    draws = rng.choice(data, size=(_RESAMPLES, data.size), replace=True)
    medians = np.median(draws, axis=1)
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(medians, [tail, 100 - tail])
    return Estimate(float(np.median(data)), float(low), float(high))


def paired_ratio(numerator: Sequence[float], denominator: Sequence[float]) -> Estimate:
    """Median of per-round ratios numerator/denominator, with its bootstrap CI."""
    if len(numerator) != len(denominator):
        raise ValueError("paired samples must have the same length")
    ratios = np.asarray(numerator, dtype=np.float64) / np.asarray(denominator, dtype=np.float64)
    return median_ci(ratios.tolist())


def classify(ratio: Estimate, epsilon: float = 0.0) -> str:
    """"faster", "slower" or "indistinguishable" for a time ratio (candidate / incumbent).

    Faster only when the whole interval lies below ``1 - epsilon``; slower only when it
    lies above ``1 + epsilon``.
    """
    if ratio.high < 1 - epsilon:
        return "faster"
    if ratio.low > 1 + epsilon:
        return "slower"
    return "indistinguishable"
