"""GPU backend slots build what they can here and refuse to load without a device."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from swarmfab.backends import CudaBackend, TritonBackend, cuda_device_available
from swarmfab.errors import BuildError, CandidateError
from swarmfab.records import Candidate
from swarmfab.workloads import get_workload

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
no_device = pytest.mark.skipif(cuda_device_available(), reason="a CUDA device is present")

KERNEL = """extern "C" __global__ void scale(float *x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
"""


def _cuda(source: str) -> Candidate:
    return Candidate("kda", "cuda", {"kernel.cu": source}, "kernel.cu")


@needs_nvcc
def test_cuda_sources_compile_for_hopper_without_a_device(tmp_path: Path) -> None:
    artifact = CudaBackend().build(_cuda(KERNEL), tmp_path)
    assert artifact.path.exists()
    assert CudaBackend().build(_cuda(KERNEL), tmp_path).cached


@needs_nvcc
def test_cuda_compile_errors_come_back_structured(tmp_path: Path) -> None:
    with pytest.raises(BuildError) as info:
        CudaBackend().build(_cuda(KERNEL.replace("x[i] *= a;", "y[i] *= a;")), tmp_path)
    error = next(d for d in info.value.diagnostics if d.severity == "error")
    assert error.file == "kernel.cu" and error.line == 3 and '"y"' in error.message


@no_device
@needs_nvcc
def test_cuda_artifacts_do_not_load_without_a_device(tmp_path: Path) -> None:
    artifact = CudaBackend().build(_cuda(KERNEL), tmp_path)
    with pytest.raises(CandidateError, match="unavailable on this host"):
        CudaBackend().load(artifact, get_workload("kda"), fill_outputs=True)


@no_device
def test_triton_candidates_do_not_load_without_a_device(tmp_path: Path) -> None:
    candidate = Candidate("kda", "triton", {"k.py": "def forward(*a, **k):\n    pass\n"}, "k.py")
    artifact = TritonBackend().build(candidate, tmp_path)
    with pytest.raises(CandidateError, match="triton backend is unavailable on this host"):
        TritonBackend().load(artifact, get_workload("kda"), fill_outputs=True)
