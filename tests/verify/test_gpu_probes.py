"""GPU probes: the sentinel-poisoned allocator cache and the side-stream settle check
(sizing logic here; the device behaviour on GPU hosts only)."""

from __future__ import annotations

import pytest

from swarmfab.backends import cuda_device_available
from swarmfab.verify.gpu_probes import SMALL_BLOCK, poison_plan

needs_device = pytest.mark.skipif(not cuda_device_available(), reason="needs a CUDA device")
GiB = 2**30


def test_the_poison_plan_fills_the_small_pool_then_one_large_block() -> None:
    plan = poison_plan(4 * GiB, share=0.5, small_blocks=8)
    assert plan[:8] == [SMALL_BLOCK] * 8
    assert sum(plan) == 2 * GiB and len(plan) == 9


def test_the_poison_plan_is_capped_and_skips_what_does_not_fit() -> None:
    assert sum(poison_plan(140 * GiB, large_cap=16 * GiB)) == 16 * GiB
    assert poison_plan(3 * SMALL_BLOCK, share=1.0, small_blocks=64) == [SMALL_BLOCK] * 3
    assert poison_plan(0) == [] and poison_plan(GiB, share=0) == []


@needs_device
@pytest.mark.gpu
def test_an_output_allocated_after_poisoning_starts_as_nan() -> None:
    import torch

    from swarmfab.verify.gpu_probes import poison_device_memory

    answer = torch.ones(1 << 20, device="cuda")  # a correct answer, then freed
    del answer
    assert poison_device_memory() > 0
    lazy = torch.empty(1 << 20, device="cuda")  # what a kernel that writes nothing returns
    assert torch.isnan(lazy).all()


@needs_device
@pytest.mark.gpu
def test_outputs_written_on_a_side_stream_are_unsettled() -> None:
    import torch

    from swarmfab.verify.probes import unsettled_outputs

    a = torch.randn(4096, 4096, device="cuda")
    out = torch.zeros(4096, 4096, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(10):
            torch.mm(a, a, out=out)
    assert unsettled_outputs({"o": out}) == ("o",)
    assert unsettled_outputs({"o": out}) == ()
