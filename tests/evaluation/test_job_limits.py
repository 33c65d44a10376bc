"""What a timing job may do follows what runs in it: only an implementation that compiles
at its first call may start processes (a compiler) and write large files."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from swarmfab.evaluation import Evaluator, Implementation
from swarmfab.sandbox import Limits
from swarmfab.workloads import Shape, get_workload
from swarmfab.workloads._fla import FLA_BASELINES


def _limits(tmp_path: Path, device: str, *baselines: str) -> Limits:
    kda = get_workload("kda")
    evaluator = Evaluator(kda, [Shape(1, 16, 2, 2, 16, 16)], tmp_path / "cache", threads=1,
                          tolerances=kda.tolerances(torch.float32), limits=Limits(wall_s=60),
                          device=device)
    return evaluator._limits_for([Implementation(name, baseline=name) for name in baselines])


@pytest.mark.parametrize("fla", sorted(FLA_BASELINES))
def test_fla_kernels_compile_with_tritons_ptxas_so_their_jobs_may_start_processes(
        tmp_path: Path, fla: str) -> None:
    """fla's Triton kernels run ptxas at their first call: a job that forbids processes
    fails them with EPERM, as a side-by-side table on an H200 did."""
    limits = _limits(tmp_path, "cuda", "torch-recurrent", fla)
    assert limits.allow_processes and limits.memory_bytes is None
    assert not _limits(tmp_path, "cuda", "torch-recurrent").allow_processes
    assert not _limits(tmp_path, "cpu", "torch-recurrent", "torch-chunked").allow_processes
    assert _limits(tmp_path, "cpu", "torch-compile").allow_processes


def test_fla_kernels_share_one_triton_cache_that_no_other_job_may_write(tmp_path: Path) -> None:
    """Compiled once per host, not in every session: the cache directory under the build
    cache is writable to fla's sessions alone (and Triton told to use it)."""
    alone = _limits(tmp_path, "cuda", "fla-chunk")
    shared = tmp_path / "cache" / "triton-trusted"
    assert alone.writable == (str(shared),) and shared.is_dir()
    assert dict(alone.environment) == {"TRITON_CACHE_DIR": str(shared),
                                       "TRITON_CACHE_AUTOTUNING": "1"}
    for others in (("fla-chunk", "torch-recurrent"), ("torch-compile",), ("torch-recurrent",)):
        limits = _limits(tmp_path, "cuda", *others)
        assert limits.writable == () and limits.environment == ()
