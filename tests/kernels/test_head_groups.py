"""Heads side by side: the recurrence's ``head_group`` runs a job's value heads block by
block, so neighbouring heads translate the pages of a token's rows once. Each head's
arithmetic is unchanged, so the outputs and final states equal one head per job bit for
bit, whatever number of heads per job the kernel settles on for a shape.

With 2 threads the kernel takes the most heads, up to the knob, that divide HV, keep
their states within 256 KB and give no thread more heads than one head per job would:
the shapes below come out at 4, 3, 2 and 1 heads per job (states of 64 KB and 16 KB,
grouped values, a pool in scattered slots, a batch of 3 that leaves 4 heads unbalanced).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from swarmfab.backends.c import CBackend
from swarmfab.verify import compare_outputs
from swarmfab.workloads import Case, Forward, Shape, design_space, get_workload

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

CASES = [
    Case("4-heads-per-job", Shape(1, 37, 8, 8, 64, 64, initial_state=True), seed=1),
    Case("3-heads-per-job", Shape(1, 40, 6, 6, 32, 32), seed=2),
    Case("2-heads-per-job-grouped-values", Shape(3, 20, 2, 4, 16, 16, initial_state=True),
         seed=3),
    Case("2-heads-per-job-pool", Shape(2, 45, 1, 2, 16, 48, True, pool=5), seed=4),
    Case("states-past-256-kb-one-head", Shape(1, 9, 4, 4, 192, 192), seed=5),
]


def _kernels(tmp_path: Path, layout: str) -> dict[int, Forward]:
    space = design_space("kda")
    kda = get_workload("kda")
    kernels = {}
    for heads in (1, 4):
        setting = {**space.default(), "algorithm": "recurrent", "head_group": heads,
                   "state_layout": layout}
        candidate = space.instantiate(setting, threads=2)
        assert ("#define RC_HEADS 4" in candidate.sources[candidate.entry]) is (heads == 4)
        kernels[heads] = CBackend().load(CBackend().build(candidate, tmp_path), kda,
                                         fill_outputs=True)
    return kernels


@pytest.mark.parametrize("layout", ["k-major", "v-major"])
def test_heads_side_by_side_compute_what_one_head_per_job_does(
        tmp_path: Path, layout: str) -> None:
    kda = get_workload("kda")
    kernels = _kernels(tmp_path, layout)
    for case in CASES:
        # fresh inputs per call: a pool is updated in place
        alone, side_by_side = (kda.call(kernels[heads], kda.make_inputs(case))
                               for heads in (1, 4))
        assert alone.keys() == side_by_side.keys()
        for name, value in alone.items():
            assert torch.equal(value, side_by_side[name]), (case.name, name)
        checks = compare_outputs(case.name, alone, kda.reference(kda.make_inputs(case)),
                                 kda.tolerances(torch.float32))
        assert all(check.passed for check in checks), [str(c) for c in checks]


def test_jobs_of_whole_heads_only() -> None:
    """Tiles in parallel split heads between threads: no heads side by side there, and
    a setting that differs only in ``head_group`` renders the same candidate."""
    space = design_space("kda")
    tiles = {**space.default(), "algorithm": "recurrent", "parallel": "tiles"}
    one, four = (space.instantiate({**tiles, "head_group": h}, threads=2) for h in (1, 4))
    assert one.id == four.id
    assert "#define RC_HEADS 4" not in four.sources[four.entry]
