"""Measurement: the timing protocol, its statistics and the hardware bounds."""

from swarmfab.measure.stats import classify, median_ci, paired_ratio
from swarmfab.measure.timer import CONFIRMATION, EVALUATION, TimingPolicy, time_interleaved

__all__ = [
    "CONFIRMATION",
    "EVALUATION",
    "TimingPolicy",
    "classify",
    "median_ci",
    "paired_ratio",
    "time_interleaved",
]
