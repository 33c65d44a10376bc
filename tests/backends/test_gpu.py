"""GPU backends build what they can without a device, report compiler errors as
structured diagnostics, and refuse to load without a device."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

from swarmfab.backends import CudaBackend, TritonBackend, cuda_device_available
from swarmfab.backends.gpu import cuda_arch, parse_nvcc_diagnostics, parse_triton_diagnostics
from swarmfab.errors import BuildError, CandidateError
from swarmfab.records import Candidate
from swarmfab.workloads import design_space, get_workload

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


@needs_nvcc
def test_cuda_builds_keep_ptxas_report_and_key_the_cache_by_architecture(
    tmp_path: Path, no_shared_builds: None
) -> None:
    hopper = CudaBackend(arch="sm_90a").build(_cuda(KERNEL), tmp_path)
    report = (hopper.path.parent / "ptxas.txt").read_text()
    assert "registers" in report and "spill" in report
    ampere = CudaBackend(arch="sm_80").build(_cuda(KERNEL), tmp_path)
    assert ampere.path != hopper.path and not ampere.cached


def test_cuda_build_without_nvcc_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BuildError, match="nvcc is not on PATH"):
        CudaBackend(arch="sm_90a").build(_cuda(KERNEL), tmp_path)


def test_nvcc_ptxas_and_host_compiler_messages_are_parsed() -> None:
    log = (
        'kda.cu(41): error: identifier "stat" is undefined\n'
        "kda.cu(7): warning #177-D: variable \"x\" was declared but never referenced\n"
        "kda.cu:3:10: fatal error: nothere.h: No such file or directory\n"
        "ptxas error   : Entry function '_Z1fPf' uses too much shared data "
        "(0x13880 bytes, 0xc000 max)\n"
    )
    found = {(d.file, d.line, d.severity) for d in parse_nvcc_diagnostics(log)}
    assert found == {("kda.cu", 41, "error"), ("kda.cu", 7, "warning"),
                     ("kda.cu", 3, "fatal error"), ("ptxas", 0, "error")}


def test_the_gpu_architecture_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWARMFAB_CUDA_ARCH", "sm_100a")
    assert CudaBackend().arch == "sm_100a"
    monkeypatch.delenv("SWARMFAB_CUDA_ARCH")
    if not cuda_device_available():
        assert cuda_arch() == "sm_90a"


TRITON_KERNEL = '''import triton
import triton.language as tl


@triton.jit
def doubled(x, N: tl.constexpr):
    r = tl.arange(0, N)
    y = tl.load(x + r)
    tl.store(x + r, y + undefined_name)
'''


def test_triton_compile_errors_come_back_with_the_file_line(tmp_path: Path) -> None:
    """A real Triton compilation for sm_90 (no device needed) of a kernel with a bad name."""
    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    path = tmp_path / "bad_kernel.py"
    path.write_text(TRITON_KERNEL)
    spec = importlib.util.spec_from_file_location("bad_kernel", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(Exception) as info:
        triton.compile(ASTSource(module.doubled, {"x": "*fp32", "N": "constexpr"}, {"N": 16}),
                       target=GPUTarget("cuda", 90, 32))
    (found,) = parse_triton_diagnostics(str(info.value), path.name, TRITON_KERNEL)
    assert (found.file, found.line) == ("bad_kernel.py", 9)
    assert "undefined_name" in found.message


@needs_nvcc
def test_the_gpu_template_builds_with_the_cuda_backend(tmp_path: Path) -> None:
    space = design_space("kda", "cuda")
    setting = {**space.default(), "kernel": "cuda-recurrent"}
    artifact = CudaBackend(arch="sm_90a").build(space.instantiate(setting, threads=1), tmp_path)
    assert artifact.path.stat().st_size > 0
