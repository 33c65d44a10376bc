"""What a timing job may do follows what runs in it: only an implementation that compiles
at its first call may start processes (a compiler) and write large files."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from swarmfab.evaluation import Evaluator, Implementation
from swarmfab.sandbox import Limits
from swarmfab.workloads import Shape, get_workload
from swarmfab.workloads.delta.fla import FLA_BASELINES


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


SLOW_CANDIDATE = '''
import time

from swarmfab.workloads.delta import math as delta_math


def forward(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False):
    time.sleep(0.5)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    o, state = delta_math.chunked(q, k, v, g, beta, scale, initial_state)
    return o, state if output_final_state else None
'''


@pytest.mark.slow
def test_each_shape_of_a_benchmark_gets_a_jobs_limit(tmp_path: Path) -> None:
    """The sessions of an evaluation's benchmark live until every target shape is timed:
    four shapes of half-second calls (a warm-up call and three rounds each, 8 s in
    sleeps alone) outlast one job's 6 s, and fit 6 s a shape."""
    from swarmfab.backends import backend_for_file
    from swarmfab.records import Candidate, Status

    kda = get_workload("kda")
    shapes = [Shape(1, 16 + 4 * i, 2, 2, 16, 16) for i in range(4)]
    evaluator = Evaluator(kda, shapes, tmp_path / "cache", threads=1,
                          tolerances=kda.tolerances(torch.float32), limits=Limits(wall_s=6))
    file = tmp_path / "slow.py"
    file.write_text(SLOW_CANDIDATE)
    candidate = Candidate("kda", backend_for_file(file), {file.name: file.read_text()},
                          file.name)
    incumbents = {shape.label: Implementation("torch-recurrent", baseline="torch-recurrent")
                  for shape in shapes}
    verdict = evaluator.rematch(candidate, incumbents)  # timed, the outputs checked
    assert verdict.status is not Status.TIMED_OUT, verdict.reason
    assert [t.shape for t in verdict.timings] == [shape.label for shape in shapes]
    assert all(t.comparison == "slower" for t in verdict.timings)
