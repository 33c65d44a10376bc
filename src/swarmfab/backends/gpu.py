"""GPU backends: CUDA C++ (nvcc, loaded through ctypes) and Triton (a Python file).

Both build without a device: nvcc compiles a shared library for the target architecture
(sm_90a unless ``SWARMFAB_CUDA_ARCH`` or the local device says otherwise) and keeps
ptxas's register and spill report beside it; a Triton file is syntax-checked and cached
(Triton compiles at the first call, inside the sandboxed worker). Loading needs a CUDA
device and refuses, with the reason, on a host without one.

A CUDA candidate exports the workload's C ABI with device pointers and launches on the
legacy default stream; the workload's wrapper allocates (and sentinel-fills) the outputs
on the device.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

from swarmfab.backends._base import (
    Artifact,
    Backend,
    build_library,
    compiler_env,
    raise_if_out_of_space,
)
from swarmfab.backends.c import load_symbol
from swarmfab.backends.c import parse_diagnostics as parse_host_diagnostics
from swarmfab.backends.python import PythonBackend
from swarmfab.errors import BuildError, CandidateError, Diagnostic, import_extra
from swarmfab.records import Candidate
from swarmfab.workloads import Forward, Workload

__all__ = [
    "DEFAULT_CUDA_ARCH",
    "CudaBackend",
    "TritonBackend",
    "cuda_arch",
    "cuda_device_available",
    "parse_nvcc_diagnostics",
    "parse_triton_diagnostics",
]

DEFAULT_CUDA_ARCH = "sm_90a"  # Hopper (H100, H200), with wgmma and the TMA
NVCC_TIMEOUT_S = 300.0
_NVCC_BASE_FLAGS = ("-shared", "-Xcompiler", "-fPIC", "-Xptxas", "-v")
# nvcc's front end: "kernel.cu(12): error: identifier "x" is undefined"
_FRONT_END = re.compile(
    r"^(?P<file>[^\s(]+)\((?P<line>\d+)\): (?P<severity>error|warning)(?: #[\w-]+)?: "
    r"(?P<message>.*)$", re.MULTILINE)
# ptxas and nvlink name no line: "ptxas error   : Entry function ... uses too much ..."
_BACK_END = re.compile(
    r"^(?P<tool>ptxas|nvlink) (?P<severity>error|warning|fatal)\s*: (?P<message>.*)$",
    re.MULTILINE)
_PTXAS_USAGE = re.compile(r"^ptxas info\s*: (?:Function properties|Used|Compiling).*$|"
                          r"^\s*\d+ bytes stack frame.*$", re.MULTILINE)
# Triton's CompilationError: "at 12:8:" then the offending source line
_TRITON_AT = re.compile(r"^at (?P<line>\d+):(?P<column>\d+):\s*$", re.MULTILINE)


def cuda_device_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def cuda_arch() -> str:
    """The architecture to compile for: ``SWARMFAB_CUDA_ARCH``, else the local device's
    (Hopper gets the 'a' variant for wgmma), else sm_90a (this project's target)."""
    chosen = os.environ.get("SWARMFAB_CUDA_ARCH")
    if chosen:
        return chosen
    if cuda_device_available():
        import torch

        major, minor = torch.cuda.get_device_capability()
        return f"sm_{major}{minor}{'a' if major == 9 else ''}"
    return DEFAULT_CUDA_ARCH


class _OnTheDevice(Backend):
    """A backend whose candidates run on the CUDA device: built anywhere, loaded only
    where there is one."""

    device = "cuda"

    def require_device(self) -> None:
        if not cuda_device_available():
            raise CandidateError(f"the {self.name} backend is unavailable on this host: it "
                                 "needs a CUDA device and there is none "
                                 "(torch.cuda.is_available() is False)")


@functools.cache
def _nvcc_version(nvcc: str) -> str:
    try:
        done = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildError(f"nvcc ({nvcc}) cannot be run: {exc}") from exc
    return (done.stdout.strip().splitlines() or [nvcc])[-1]


def parse_nvcc_diagnostics(log: str) -> tuple[Diagnostic, ...]:
    """nvcc's front-end, host-compiler and ptxas/nvlink messages as structured records.

    ptxas and nvlink report no source line: their diagnostics carry the tool's name as
    the file and line 0."""
    found = [
        Diagnostic(Path(m["file"]).name, int(m["line"]), m["severity"], m["message"].strip())
        for m in _FRONT_END.finditer(log)
    ]
    found += parse_host_diagnostics(log)
    found += [
        Diagnostic(m["tool"], 0, "error" if m["severity"] == "fatal" else m["severity"],
                   m["message"].strip())
        for m in _BACK_END.finditer(log)
    ]
    return tuple(found)


def parse_triton_diagnostics(message: str, file: str, source: str = "") -> tuple[Diagnostic, ...]:
    """A Triton compilation error as a structured record against ``file``.

    Triton says "at LINE:COL:" counting from the kernel's ``def``, then prints the
    kernel's source up to the bad line, a caret and the reason; with the file's
    ``source`` the line is made absolute by finding that ``def`` in it."""
    match = _TRITON_AT.search(message)
    if match is None:
        return ()
    lines = message[match.end():].strip("\n").splitlines()
    caret = next((i for i, line in enumerate(lines) if line.strip() == "^"), len(lines))
    reason = " ".join(line.strip() for line in lines[caret + 1:]).strip()
    line = int(match["line"])
    source_lines = [text.rstrip() for text in source.splitlines()]
    if lines and lines[0].rstrip() in source_lines:
        line += source_lines.index(lines[0].rstrip())
    snippet = lines[caret - 1].strip() if 0 < caret <= len(lines) else ""
    return (Diagnostic(file, line, "error", reason or snippet or "compilation failed"),)


class CudaBackend(_OnTheDevice):
    """CUDA C++ (inline PTX allowed) compiled by nvcc into a shared library."""

    name = "cuda"

    def __init__(self, arch: str | None = None):
        self.arch = arch or cuda_arch()

    def describe(self) -> dict[str, str]:
        nvcc = shutil.which("nvcc")
        return {"nvcc": _nvcc_version(nvcc) if nvcc else "absent", "arch": self.arch}

    def cache_key(self, candidate: Candidate, nvcc: str) -> str:
        parts = [candidate.id, " ".join(candidate.flags), _nvcc_version(nvcc), self.arch,
                 " ".join(_NVCC_BASE_FLAGS)]
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]

    def build(self, candidate: Candidate, cache_dir: Path) -> Artifact:
        nvcc = shutil.which("nvcc")
        if nvcc is None:
            raise BuildError("nvcc is not on PATH: install the CUDA toolkit (12.4 or later) "
                             "to build cuda candidates")
        target = cache_dir.resolve() / "cuda" / self.cache_key(candidate, nvcc) / "kernel.so"

        def compile_into(scratch: Path, output: Path) -> None:
            log = _run_nvcc([nvcc, f"-arch={self.arch}", *candidate.flags, *_NVCC_BASE_FLAGS,
                             "-o", str(output), str(scratch / candidate.entry)], scratch)
            (target.parent / "ptxas.txt").write_text(ptxas_usage(log))

        return build_library(self.name, candidate, target, compile_into)

    def load(self, artifact: Artifact, workload: Workload, *, fill_outputs: bool) -> Forward:
        self.require_device()
        import torch

        torch.cuda.init()  # the runtime in the library shares PyTorch's primary context
        return workload.wrap_c(load_symbol(artifact, workload), fill_outputs=fill_outputs,
                               device="cuda")


def ptxas_usage(log: str) -> str:
    """ptxas's per-kernel registers, shared memory, stack and spills (from ``-Xptxas -v``)."""
    return "\n".join(m.group(0).strip() for m in _PTXAS_USAGE.finditer(log)) + "\n"


def _run_nvcc(command: list[str], cwd: Path) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, cwd=cwd,
                              timeout=NVCC_TIMEOUT_S, env=compiler_env())
    except subprocess.TimeoutExpired as exc:
        raise BuildError(f"nvcc took longer than {NVCC_TIMEOUT_S:.0f} s") from exc
    except OSError as exc:
        raise BuildError(f"cannot run nvcc: {exc}") from exc
    log = (done.stderr + done.stdout)[-20_000:]
    if done.returncode != 0:
        raise_if_out_of_space(log, cwd)
        diagnostics = parse_nvcc_diagnostics(log)
        errors = [d for d in diagnostics if d.severity != "warning"]
        first = str(errors[0]) if errors else (log.strip().splitlines() or ["?"])[0]
        raise BuildError(f"nvcc failed: {first}", diagnostics, log)
    return log


class TritonBackend(_OnTheDevice):
    """A Python file with ``@triton.jit`` kernels and the workload's ``forward``.

    Triton compiles at the first call and runs ptxas (and, once, a C compiler for its
    launcher) in subprocesses, so these jobs may start processes; its cache goes to the
    job's own directory.
    """

    name = "triton"
    needs_processes = True

    def describe(self) -> dict[str, str]:
        try:
            import triton
        except ImportError:
            return {"triton": "absent"}
        return {"triton": str(triton.__version__)}

    def build(self, candidate: Candidate, cache_dir: Path) -> Artifact:
        artifact = PythonBackend().build(candidate, cache_dir)
        return Artifact(self.name, artifact.path, artifact.cached)

    def load(self, artifact: Artifact, workload: Workload, *, fill_outputs: bool) -> Forward:
        self.require_device()
        # a sandboxed job may write only its own directory: Triton's cache goes there
        os.environ["TRITON_HOME"] = str(Path.cwd())
        os.environ["TRITON_CACHE_DIR"] = str(Path.cwd() / "triton-cache")
        forward = PythonBackend().load(artifact, workload, fill_outputs=fill_outputs)
        return _with_triton_diagnostics(forward, artifact.path)


def _with_triton_diagnostics(forward: Forward, file: Path) -> Forward:
    """``forward`` whose Triton compilation errors (raised at the first call) become a
    CandidateError naming the line."""
    CompilationError = import_extra(
        "triton.compiler.errors", "gpu", "a Triton candidate").CompilationError

    @functools.wraps(forward)
    def checked(*args: object, **kwargs: object) -> object:
        try:
            return forward(*args, **kwargs)
        except CompilationError as exc:
            found = parse_triton_diagnostics(str(exc), file.name, file.read_text())
            where = str(found[0]) if found else str(exc).strip().splitlines()[-1]
            raise CandidateError(f"triton compilation failed: {where}") from exc

    return checked
