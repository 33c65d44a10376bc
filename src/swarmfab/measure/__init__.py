"""Measurement: the timing protocol, its statistics and the hardware bounds."""

from swarmfab.measure.stats import classify, median_ci, paired_ratio
from swarmfab.measure.timer import CONFIRMATION, TimingPolicy, time_interleaved

__all__ = [
    "CONFIRMATION",
    "TimingPolicy",
    "classify",
    "median_ci",
    "paired_ratio",
    "time_interleaved",
]
