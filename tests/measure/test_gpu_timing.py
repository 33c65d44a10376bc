"""GPU timing: the flush sizing and the protocol with a device stopwatch (pure logic
here; the CUDA-event stopwatch itself is tested on GPU hosts only)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from swarmfab.backends import cuda_device_available
from swarmfab.measure import TimingPolicy, time_interleaved
from swarmfab.measure.gpu import DEFAULT_L2_BYTES, l2_flush_bytes

# the protocol itself: timed at full size, not the suite's test size (tests/conftest.py)
pytestmark = pytest.mark.full_timing_protocol

needs_device = pytest.mark.skipif(not cuda_device_available(), reason="needs a CUDA device")
MiB = 2**20


@pytest.mark.parametrize(("l2", "flush"), [
    (50 * MiB, 100 * MiB),  # H100, H200
    (40 * MiB, 80 * MiB),  # A100
    (6 * MiB + 123, 13 * MiB),  # rounded up to a whole MiB
    (None, 2 * DEFAULT_L2_BYTES),  # a device that reports no L2
    (0, 2 * DEFAULT_L2_BYTES),
])
def test_the_l2_flush_writes_twice_the_cache(l2: int | None, flush: int) -> None:
    assert l2_flush_bytes(l2) == flush


class _LedgerStopwatch:
    """A cold stopwatch that charges each call a fixed cost and keeps a ledger, so the
    protocol's order of evictions, calls and samples can be read back."""

    cold = True

    def __init__(self, costs: dict[str, float]):
        self.costs, self.ledger = costs, []  # type: ignore[var-annotated]

    def evict(self, round_index: int) -> None:
        self.ledger.append("evict")

    def seconds(self, call: Callable[[], object], repeats: int) -> float:
        name = str(call())
        self.ledger.append(f"{name}x{repeats}")
        return self.costs[name]


def test_a_cold_stopwatch_times_one_call_per_sample_after_an_eviction() -> None:
    watch = _LedgerStopwatch({"fla": 2e-3, "candidate": 1e-3})
    calls = {"fla": lambda: "fla", "candidate": lambda: "candidate"}
    policy = TimingPolicy(min_rounds=5, max_rounds=50, warmup_calls=2)
    samples = time_interleaved(calls, policy, reference="fla", stopwatch=watch)
    # identical samples give a zero-width interval: it stops at the minimum rounds
    assert samples == {"fla": [2e-3] * 5, "candidate": [1e-3] * 5}
    timed = watch.ledger[watch.ledger.index("evict"):]
    assert timed[0::2] == ["evict"] * 10  # every sample follows an eviction
    assert all(entry.endswith("x1") for entry in timed[1::2])
    assert timed[1::2][:4] == ["flax1", "candidatex1", "candidatex1", "flax1"]  # rotation


@needs_device
@pytest.mark.gpu
def test_the_device_stopwatch_counts_work_left_on_a_side_stream() -> None:
    import torch

    from swarmfab.measure.gpu import DeviceStopwatch

    a = torch.randn(4096, 4096, device="cuda")
    side = torch.cuda.Stream()

    def cheat() -> None:  # returns at once; the work finishes later on another stream
        with torch.cuda.stream(side):
            for _ in range(20):
                a @ a

    def honest() -> None:
        for _ in range(20):
            a @ a
        torch.cuda.synchronize()

    watch = DeviceStopwatch()
    honest_s = min(watch.seconds(honest, 1) for _ in range(3))
    begin = time.perf_counter()
    cheat()
    host_s = time.perf_counter() - begin
    torch.cuda.synchronize()
    cheat_s = min(watch.seconds(cheat, 1) for _ in range(3))
    assert host_s < honest_s / 2 < cheat_s
