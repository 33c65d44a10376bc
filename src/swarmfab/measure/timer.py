"""The benchmark protocol: interleaved, warmed-up, adaptive repetitions.

Several implementations of the same call are timed in rounds; each round runs every
implementation once, in an order that rotates from round to round, so drift and cache
warmth fall on all of them alike. Rounds go on until the confidence interval of every
paired ratio is narrow enough, or the time cap is reached (then the interval says how
sure we are, and the comparison stays honest).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from swarmfab.measure.stats import paired_ratio

__all__ = ["CONFIRMATION", "TimingPolicy", "time_interleaved"]

_clock = time.perf_counter  # captured at import, before any candidate code is loaded


@dataclass(frozen=True, slots=True)
class TimingPolicy:
    """How hard to try. ``target_width`` is the relative half-width of the ratio's CI."""

    min_rounds: int = 5
    max_rounds: int = 60
    max_seconds: float = 3.0
    warmup_calls: int = 2
    target_width: float = 0.02


CONFIRMATION = TimingPolicy(min_rounds=10, max_rounds=200, max_seconds=8.0, target_width=0.01)
"""A stricter policy for figures shown to the user (the closing table, ``swarmfab bench``)."""


def time_interleaved(
    calls: dict[str, Callable[[], object]], policy: TimingPolicy, reference: str
) -> dict[str, list[float]]:
    """Seconds per call for each implementation, over the same rounds.

    Precision is judged on each implementation's ratio to ``reference``.
    """
    names = list(calls)
    for name in names:
        for _ in range(policy.warmup_calls):
            calls[name]()
    samples: dict[str, list[float]] = {name: [] for name in names}
    started = _clock()
    for round_index in range(policy.max_rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            begin = _clock()
            calls[name]()
            samples[name].append(_clock() - begin)
        if round_index + 1 >= policy.min_rounds and (
            _precise(samples, reference, policy.target_width)
            or _clock() - started > policy.max_seconds
        ):
            break
    return samples


def _precise(samples: dict[str, list[float]], reference: str, width: float) -> bool:
    for name, values in samples.items():
        if name == reference:
            continue
        ratio = paired_ratio(values, samples[reference])
        if (ratio.high - ratio.low) / 2 > width * ratio.median:
            return False
    return True
