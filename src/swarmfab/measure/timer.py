"""The benchmark protocol: interleaved, warmed-up, adaptive repetitions.

Several implementations of the same call are timed in rounds; each round runs every
implementation once, in an order that rotates from round to round, so drift and cache
warmth fall on all of them alike. Each sample follows one untimed call of the same
implementation: the first call after another implementation ran pays for the switch (an
OpenMP pool that went to sleep during a single-threaded kernel took 2-5x longer to wake
than to work), and a user calling one kernel in a loop never pays that. Calls shorter
than a millisecond are repeated within a sample (the same number of times for everyone).
Rounds go on until the confidence interval of every paired ratio is narrow enough (a
policy may ask less of a ratio of many times, whose comparison is already decided), or
the time cap is reached (then the interval says how sure we are, and the comparison
stays honest).

``SWARMFAB_TIMING_PROTOCOL=test`` (:data:`PROTOCOL_ENV`) sizes every timing to a test's,
whatever policy was chosen (:func:`sized`): its minimum of rounds capped at
:data:`TEST_MIN_ROUNDS` and its time cap at :data:`TEST_MAX_SECONDS`. The test suite sets
it for the tests that do not test the protocol itself, and the runs they start inherit
it; a user never needs it: the figures it gives are rougher, not different.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from swarmfab.measure.stats import paired_ratio

__all__ = [
    "CONFIRMATION",
    "EVALUATION",
    "PROTOCOL_ENV",
    "HostStopwatch",
    "Stopwatch",
    "TimingPolicy",
    "last_level_cache_bytes",
    "sized",
    "time_interleaved",
]

_clock = time.perf_counter  # captured at import, before any candidate code is loaded


@dataclass(frozen=True, slots=True)
class TimingPolicy:
    """How hard to try. ``target_width`` is the relative half-width of the ratio's CI."""

    min_rounds: int = 5
    max_rounds: int = 60
    max_seconds: float = 3.0
    warmup_calls: int = 2
    target_width: float = 0.02
    min_sample_s: float = 1e-3  # short calls are repeated so one sample lasts at least this
    flush_bytes: int = 0  # > 0: write this many bytes before every timed sample (cold cache)
    # a call at least this long needs neither warm-up rounds after its first call nor an
    # untimed call before each sample: what a switch costs (a thread pool waking up, a
    # few milliseconds) is a small share of it, and a slow baseline on a large shape
    # would otherwise triple an evaluation's time; inf: every call gets both
    long_call_s: float = math.inf
    # rounds enough where some call is long: a ratio of many times is clear in a few
    # samples, and the interval reported says how sure it is
    long_call_min_rounds: int = 3
    # a ratio whose whole interval lies beyond ``clear_factor`` either way (many times
    # faster or slower) needs a half-width of ``clear_width`` only: no comparison with 1
    # can come out otherwise, and against a slow, noisy baseline a 2% interval takes the
    # whole time cap; inf: every ratio needs ``target_width``
    clear_factor: float = math.inf
    clear_width: float = 0.1

    @property
    def cache(self) -> str:
        return "cold" if self.flush_bytes else "warm"


EVALUATION = TimingPolicy(long_call_s=0.25, clear_factor=2.0)
"""Candidates against their incumbent: switching costs are kept out of every sample but
those of calls over a quarter of a second (a PyTorch baseline on a large shape), where
they are at most a few percent against ratios of many times. A ratio beyond 2x either way
(a first candidate against the baselines) is measured to within 10%: the comparison is
decided, and a candidate timed against the champion after it is held to 2%."""

CONFIRMATION = TimingPolicy(min_rounds=10, max_rounds=200, max_seconds=8.0, target_width=0.01,
                            long_call_s=0.5)
"""A stricter policy for figures shown to the user (the closing table, ``swarmfab bench``);
a switch costs calls of half a second or more at most about 1% (a few milliseconds)."""


PROTOCOL_ENV = "SWARMFAB_TIMING_PROTOCOL"
# a test-sized timing (the module's doc): EVALUATION's rounds at least, a second at most
TEST_MIN_ROUNDS = 5
TEST_MAX_SECONDS = 1.0


def sized(policy: TimingPolicy) -> TimingPolicy:
    """``policy`` as this process times it: as chosen, or cut to a test's size where
    ``SWARMFAB_TIMING_PROTOCOL=test`` (read at each call: a test of the protocol unsets
    it). Precision targets stay: a test-sized timing stops sooner, it asks no less."""
    if os.environ.get(PROTOCOL_ENV, "").strip().lower() != "test":
        return policy
    return replace(policy, min_rounds=min(policy.min_rounds, TEST_MIN_ROUNDS),
                   max_seconds=min(policy.max_seconds, TEST_MAX_SECONDS))


class Stopwatch(Protocol):
    """Where a sample's time comes from (the host clock, or CUDA events on a device)."""

    cold: bool  # True: caches are evicted before every sample, which times one call

    def evict(self, round_index: int) -> None:
        """Evict the caches before a sample (untimed); nothing when warm."""

    def seconds(self, call: Callable[[], object], repeats: int) -> float:
        """Seconds per call over ``repeats`` back-to-back calls, all work finished."""


class HostStopwatch:
    """The CPU's clock; a cold cache is made by writing ``flush_bytes`` before a sample."""

    def __init__(self, flush_bytes: int = 0):
        self.cold = flush_bytes > 0
        self._scratch = np.empty(flush_bytes, dtype=np.uint8) if flush_bytes else None

    def evict(self, round_index: int) -> None:
        if self._scratch is not None:
            self._scratch.fill(round_index & 0xFF)

    def seconds(self, call: Callable[[], object], repeats: int) -> float:
        begin = _clock()
        for _ in range(repeats):
            call()
        return (_clock() - begin) / repeats


def time_interleaved(
    calls: dict[str, Callable[[], object]], policy: TimingPolicy, reference: str,
    stopwatch: Stopwatch | None = None,
) -> dict[str, list[float]]:
    """Seconds per call for each implementation, over the same rounds.

    Precision is judged on each implementation's ratio to ``reference``. ``stopwatch``
    defaults to the host clock with the policy's cache flush. The policy is
    :func:`sized` first (a test-sized protocol where the environment asks for one).
    """
    policy = sized(policy)
    watch = stopwatch or HostStopwatch(policy.flush_bytes)
    names = list(calls)
    first = _warm_up(calls, policy.warmup_calls, watch, long_call_s=policy.long_call_s)
    shortest = min(first.values())
    # cold samples time one call each: repeating it would warm the cache again
    inner = 1 if watch.cold else max(1, math.ceil(policy.min_sample_s / max(shortest, 1e-9)))
    samples: dict[str, list[float]] = {name: [] for name in names}
    min_rounds = policy.min_rounds
    if max(first.values()) >= policy.long_call_s:
        min_rounds = min(min_rounds, policy.long_call_min_rounds)
    started = _clock()
    for round_index in range(policy.max_rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            if first[name] < policy.long_call_s:
                calls[name]()  # untimed: the switch from another implementation (module doc)
            watch.evict(round_index)  # untimed
            samples[name].append(watch.seconds(calls[name], inner))
        if round_index + 1 >= min_rounds and (
            _precise(samples, reference, policy)
            or _clock() - started > policy.max_seconds
        ):
            break
    return samples


def _warm_up(
    calls: dict[str, Callable[[], object]], count: int, watch: Stopwatch, settle: float = 0.05,
    long_call_s: float = math.inf,
) -> dict[str, float]:
    """Warm every implementation in lock-step rounds: at least ``count`` rounds, then until
    each one's last two calls agree within ``settle`` (caches, page faults and lazy
    initialisation are done); at most 4x ``count`` rounds or one second. Everyone gets the
    same number of warm-up calls, but for calls of at least ``long_call_s``: one is enough
    for them. Returns each implementation's fastest warm-up call, in seconds."""
    started = _clock()
    fastest = dict.fromkeys(calls, math.inf)
    previous = dict.fromkeys(calls, math.inf)
    for index in range(max(1, 4 * count)):
        settled = True
        for name, call in calls.items():
            if index > 0 and fastest[name] >= long_call_s:
                continue
            seconds = watch.seconds(call, 1)
            fastest[name] = min(fastest[name], seconds)
            settled &= abs(seconds - previous[name]) <= settle * min(seconds, previous[name])
            previous[name] = seconds
        if index + 1 >= count and (settled or _clock() - started > 1.0):
            break
    return fastest


def _precise(samples: dict[str, list[float]], reference: str, policy: TimingPolicy) -> bool:
    """Whether every ratio to ``reference`` is as narrow as the policy asks."""
    for name, values in samples.items():
        if name == reference:
            continue
        ratio = paired_ratio(values, samples[reference])
        clear = ratio.high < 1 / policy.clear_factor or ratio.low > policy.clear_factor
        width = policy.clear_width if clear else policy.target_width
        if (ratio.high - ratio.low) / 2 > width * ratio.median:
            return False
    return True


def last_level_cache_bytes(default: int = 64 * 2**20) -> int:
    """Size of the largest CPU cache, from sysfs (``default`` where it cannot be read)."""
    from pathlib import Path

    sizes = []
    for entry in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = entry.read_text().strip().upper()
        factor = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * factor)
    return max(sizes, default=default)
