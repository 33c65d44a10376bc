"""GPU backend slots: CUDA (nvcc) and Triton.

Both build what can be built without a device (nvcc compiles here; Triton sources are
syntax-checked) and refuse to load, with a clear reason, on a host without a CUDA
device. Launch ABIs per workload come with the GPU kernel factory.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from swarmfab.backends._base import Artifact, Backend
from swarmfab.backends.python import PythonBackend
from swarmfab.errors import BuildError, CandidateError, Diagnostic
from swarmfab.records import Candidate
from swarmfab.workloads import Forward, Workload

__all__ = ["CudaBackend", "TritonBackend", "cuda_device_available"]

_NVCC_DIAGNOSTIC = re.compile(
    r"^(?P<file>[^\s(]+)\((?P<line>\d+)\): (?P<severity>error|warning): (?P<message>.*)$",
    re.MULTILINE,
)
NVCC_TIMEOUT_S = 300.0


def cuda_device_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def _unavailable(backend: str) -> CandidateError:
    return CandidateError(f"the {backend} backend is unavailable on this host (no CUDA device)")


class CudaBackend(Backend):
    """CUDA C++ (inline PTX allowed) compiled by nvcc into a shared library."""

    name = "cuda"

    def __init__(self, arch: str = "sm_90a"):
        self.arch = arch

    def describe(self) -> dict[str, str]:
        return {"nvcc": shutil.which("nvcc") or "absent", "arch": self.arch}

    def build(self, candidate: Candidate, cache_dir: Path) -> Artifact:
        nvcc = shutil.which("nvcc")
        if nvcc is None:
            raise BuildError("nvcc is not installed: the cuda backend cannot build here")
        key = hashlib.sha256(f"{candidate.id}|{self.arch}|{candidate.flags}".encode())
        target = cache_dir.resolve() / "cuda" / key.hexdigest()[:24] / "kernel.so"
        if target.exists():
            return Artifact(self.name, target, cached=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
            for rel, text in candidate.sources.items():
                (Path(scratch) / rel).write_text(text)
            output = Path(scratch) / "kernel.so"
            command = [nvcc, f"-arch={self.arch}", "-O3", "-shared", "-Xcompiler", "-fPIC",
                       *candidate.flags, "-o", str(output), candidate.entry]
            _run_nvcc(command, Path(scratch))
            os.replace(output, target)
        return Artifact(self.name, target)

    def load(self, artifact: Artifact, workload: Workload, *, fill_outputs: bool) -> Forward:
        if not cuda_device_available():
            raise _unavailable(self.name)
        raise CandidateError(f"workload {workload.name} declares no CUDA launch ABI yet")


def _run_nvcc(command: list[str], cwd: Path) -> None:
    try:
        done = subprocess.run(command, capture_output=True, text=True, cwd=cwd,
                              timeout=NVCC_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise BuildError(f"nvcc took longer than {NVCC_TIMEOUT_S:.0f} s") from exc
    if done.returncode != 0:
        log = (done.stderr or done.stdout)[-20_000:]
        diagnostics = tuple(
            Diagnostic(Path(m["file"]).name, int(m["line"]), m["severity"], m["message"].strip())
            for m in _NVCC_DIAGNOSTIC.finditer(log)
        )
        errors = [d for d in diagnostics if d.severity == "error"]
        first = str(errors[0]) if errors else (log.strip().splitlines() or ["?"])[0]
        raise BuildError(f"nvcc failed: {first}", diagnostics, log)


class TritonBackend(Backend):
    """A Python file with ``@triton.jit`` kernels and the workload's ``forward``."""

    name = "triton"

    def build(self, candidate: Candidate, cache_dir: Path) -> Artifact:
        artifact = PythonBackend().build(candidate, cache_dir)
        return Artifact(self.name, artifact.path, artifact.cached)

    def load(self, artifact: Artifact, workload: Workload, *, fill_outputs: bool) -> Forward:
        if not cuda_device_available():
            raise _unavailable(self.name)
        return PythonBackend().load(artifact, workload, fill_outputs=fill_outputs)
