"""Timing statistics: medians with bootstrap CIs, paired ratios, and the three-way verdict."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import pytest

from swarmfab.measure import (
    CONFIRMATION,
    TimingPolicy,
    classify,
    median_ci,
    paired_ratio,
    time_interleaved,
)
from swarmfab.measure.timer import PROTOCOL_ENV, sized
from swarmfab.records import Estimate

# the protocol itself: timed at full size, not the suite's test size (tests/conftest.py)
pytestmark = pytest.mark.full_timing_protocol


def _timings(n: int = 40, seed: int = 0) -> list[float]:
    """Heavy-ish right tail, like real timings on a shared machine."""
    rng = np.random.default_rng(seed)
    return (1e-3 * rng.lognormal(0.0, 0.05, n)).tolist()


def _noise(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).lognormal(0.0, 0.01, n)


def test_median_ci_contains_the_median() -> None:
    samples = _timings()
    estimate = median_ci(samples)
    assert estimate.median == pytest.approx(float(np.median(samples)))
    assert estimate.low <= estimate.median <= estimate.high
    assert estimate.low < estimate.high
    assert min(samples) <= estimate.low and estimate.high <= max(samples)


def test_median_ci_is_reproducible_and_degenerate_for_one_sample() -> None:
    samples = _timings(seed=3)
    assert median_ci(samples) == median_ci(samples)
    assert median_ci([2.5]) == Estimate(2.5, 2.5, 2.5)
    with pytest.raises(ValueError):
        median_ci([])


def test_paired_ratio_of_identical_samples_is_one_and_indistinguishable() -> None:
    samples = _timings()
    ratio = paired_ratio(samples, list(samples))
    assert ratio.median == pytest.approx(1.0)
    assert ratio.low <= 1.0 <= ratio.high
    assert classify(ratio) == "indistinguishable"


@pytest.mark.parametrize(("factor", "expected"), [(1.3, "slower"), (0.7, "faster")])
def test_paired_ratio_detects_a_scaled_implementation(factor: float, expected: str) -> None:
    base = np.asarray(_timings(seed=1))
    candidate = (base * factor * _noise(base.size, 2)).tolist()
    incumbent = (base * _noise(base.size, 3)).tolist()
    ratio = paired_ratio(candidate, incumbent)
    assert ratio.median == pytest.approx(factor, rel=0.02)
    assert ratio.low <= ratio.median <= ratio.high
    assert classify(ratio) == expected
    assert classify(ratio, epsilon=0.02) == expected


def test_pairing_cancels_drift_shared_by_both_sides() -> None:
    drift = np.linspace(1.0, 3.0, 40)  # the machine slows down threefold during the run
    incumbent = (1e-3 * drift).tolist()
    candidate = (0.8e-3 * drift).tolist()
    ratio = paired_ratio(candidate, incumbent)
    assert ratio.median == pytest.approx(0.8)
    assert classify(ratio) == "faster"


def test_paired_ratio_requires_equal_lengths() -> None:
    with pytest.raises(ValueError, match="same length"):
        paired_ratio([1.0, 2.0], [1.0])


def test_classify_respects_epsilon() -> None:
    slightly_slower = Estimate(1.01, 1.005, 1.015)
    assert classify(slightly_slower) == "slower"
    assert classify(slightly_slower, epsilon=0.02) == "indistinguishable"
    straddling = Estimate(0.99, 0.95, 1.02)
    assert classify(straddling) == "indistinguishable"


def test_estimate_inversion_swaps_bounds() -> None:
    speedup = Estimate(0.5, 0.4, 0.8).inverted()
    assert speedup == Estimate(2.0, 1.25, 2.5)


def test_time_interleaved_times_every_implementation_in_the_same_rounds() -> None:
    calls: list[str] = []

    def slow(name: str) -> Callable[[], None]:
        def call() -> None:  # longer than a sample's minimum, so called once per sample
            calls.append(name)
            time.sleep(0.0015)

        return call

    policy = TimingPolicy(min_rounds=4, max_rounds=7, max_seconds=30.0, warmup_calls=1,
                          target_width=1e-12)  # never precise enough: runs max_rounds
    samples = time_interleaved({"a": slow("a"), "b": slow("b")}, policy, reference="a")
    assert set(samples) == {"a", "b"}
    assert len(samples["a"]) == len(samples["b"]) == 7
    assert all(s >= 0.0015 for s in samples["a"] + samples["b"])
    for name in ("a", "b"):  # warm-up (1 to 4 calls, until settled), 7 rounds of 2 calls
        assert 1 + 14 <= calls.count(name) <= 4 + 14
    rounds = calls[-28:]  # an untimed call, then the sample, of the same implementation
    assert all(rounds[i] == rounds[i + 1] for i in range(0, len(rounds), 2))
    assert {rounds[i] for i in range(0, len(rounds), 4)} == {"a", "b"}  # order rotates


def test_what_switching_implementations_costs_stays_out_of_the_samples() -> None:
    """The first call after another implementation ran pays a penalty (an OpenMP pool
    waking up, say): the untimed call before each sample takes it, not the sample."""
    last: list[str] = []

    def kernel(name: str) -> Callable[[], None]:
        def call() -> None:
            time.sleep(0.02 if last and last[-1] != name else 0.002)
            last.append(name)

        return call

    policy = TimingPolicy(min_rounds=5, max_rounds=5, max_seconds=30.0, warmup_calls=1)
    samples = time_interleaved({"a": kernel("a"), "b": kernel("b")}, policy, reference="a")
    assert max(samples["a"] + samples["b"]) < 0.015


def test_time_interleaved_gives_every_implementation_the_same_number_of_calls() -> None:
    counts = {"a": 0, "b": 0}

    def bump(name: str) -> Callable[[], None]:
        def call() -> None:
            counts[name] += 1

        return call

    policy = TimingPolicy(min_rounds=3, max_rounds=3, warmup_calls=2)
    samples = time_interleaved({"a": bump("a"), "b": bump("b")}, policy, reference="a")
    assert len(samples["a"]) == len(samples["b"]) == 3
    assert counts["a"] == counts["b"]
    assert all(s < 1e-3 for s in samples["a"])  # seconds per call, not per sample


def test_a_long_call_gets_no_untimed_call_before_its_samples_but_a_short_one_does() -> None:
    """Evaluations against a slow baseline: its switch cost is a small share of a call,
    so it is not called twice per sample (which would triple an evaluation's time)."""
    counts = {"slow": 0, "fast": 0}

    def call(name: str, seconds: float) -> Callable[[], None]:
        def run() -> None:
            counts[name] += 1
            time.sleep(seconds)

        return run

    policy = TimingPolicy(min_rounds=5, max_rounds=5, warmup_calls=2, long_call_s=0.05,
                          long_call_min_rounds=3, max_seconds=0.0)
    samples = time_interleaved({"slow": call("slow", 0.06), "fast": call("fast", 0.002)},
                               policy, reference="slow")
    assert len(samples["slow"]) == len(samples["fast"]) == 3  # fewer rounds: a long call
    assert counts["slow"] == 1 + 3  # one warm-up call, then only the samples
    assert counts["fast"] >= 2 + 2 * 3  # warm-up rounds, and an untimed call per sample


def test_a_test_sized_protocol_stops_sooner_and_asks_no_less(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SWARMFAB_TIMING_PROTOCOL=test (the suite's, for tests that do not test the
    protocol): fewer rounds before stopping is considered and a shorter time cap; the
    precision asked of a ratio is unchanged, and without the variable nothing is."""
    assert sized(CONFIRMATION) is CONFIRMATION  # this module: the full protocol
    monkeypatch.setenv(PROTOCOL_ENV, "test")
    small = sized(CONFIRMATION)
    assert (small.min_rounds, small.max_seconds) == (5, 1.0)
    assert small.target_width == CONFIRMATION.target_width
    assert small.max_rounds == CONFIRMATION.max_rounds
    assert sized(small) == small  # already within a test's size
    policy = TimingPolicy(min_rounds=4, max_rounds=12, max_seconds=30.0, warmup_calls=1,
                          target_width=1e-12)  # never precise enough: runs to a limit
    samples = time_interleaved({"a": lambda: time.sleep(0.1), "b": lambda: time.sleep(0.002)},
                               policy, reference="a")  # rounds of about 0.2 s
    assert 4 <= len(samples["a"]) < 12  # the test's time cap ended it
