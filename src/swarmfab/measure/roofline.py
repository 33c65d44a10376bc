"""The roofline: what this host can physically do, and how close a kernel gets.

Two peaks are measured once per host fingerprint (and stored by the caller): the float32
multiply-add rate (the larger of a compiled vector FMA loop built for this host,
``fma_peak.c``, and a PyTorch GEMM), and memory bandwidth (bytes read plus bytes written)
of the faster of a large copy and a large update in place. The update pays no read for
ownership of the lines it writes, a copy does: on a 2-core Zen 4 VM the update moved 50-55
GB/s where the copy moved 30-35, and a decode updating its states in place reached 140%
of a copy-only bound. For a call with F floating-point operations and B compulsory bytes the
bound is ``max(F / peak_flops, B / bandwidth)`` seconds; a kernel's roofline fraction
is bound / measured time (above 100% is possible when the data fits in cache). A time far
below the compute bound (FLOPs at peak rate) is physically impossible: the evaluator
treats it as a broken measurement or a cheat, never as a speedup.
"""

from __future__ import annotations

import ctypes
import os
import platform
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

__all__ = [
    "IMPOSSIBLE_FRACTION",
    "HostPeaks",
    "cpu_model",
    "device_fingerprint",
    "host_fingerprint",
    "measure_device_peaks",
    "measure_peaks",
]

IMPOSSIBLE_FRACTION = 2.0  # a kernel "faster" than twice the bound is rejected
_GEMM_N = 2048
_COPY_BYTES = 256 * 2**20


@dataclass(frozen=True, slots=True)
class HostPeaks:
    fingerprint: str
    flops_per_s: float
    bytes_per_s: float

    def bound_seconds(self, flops: float, nbytes: float) -> float:
        """The DRAM roofline bound: a shape whose data fits in cache can beat it."""
        return max(flops / self.flops_per_s, nbytes / self.bytes_per_s)

    def compute_bound_seconds(self, flops: float) -> float:
        """No cache helps here: a call cannot take less than its FLOPs at peak rate."""
        return flops / self.flops_per_s


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            model = next((line.split(":", 1)[1].strip() for line in cpuinfo
                          if line.startswith("model name")), model)
    except OSError:
        pass
    return model


def host_fingerprint(threads: int) -> str:
    """CPU model, ISA, how peaks are measured and thread count: peaks are only reused on a
    matching host."""
    from swarmfab.backends import host_isa

    model = cpu_model()
    # "peaks v4": bandwidth of a copy or an update in place (v3 copied only), the FMA loop
    # at each vector width (v2 spilled on AVX2, v1 was GEMM alone), so peaks stored by
    # earlier versions are not reused
    # (readers match on the "| ISA | N threads" tail, so it goes after the model)
    return f"{model} | peaks v4 | {host_isa()} | {threads} threads"


def _best_seconds(call: Callable[[], object], repeats: int) -> float:
    """The fastest of ``repeats`` calls: a peak is what the machine can do at its best."""
    call()  # warm-up
    times = []
    for _ in range(repeats):
        begin = time.perf_counter()
        call()
        times.append(time.perf_counter() - begin)
    return min(times)


def device_fingerprint() -> str:
    """The CUDA device's name and capability: GPU peaks are reused on the same model."""
    import torch

    major, minor = torch.cuda.get_device_capability()
    return f"{torch.cuda.get_device_name()} | sm_{major}{minor} | cuda"


def _device_seconds(call: Callable[[], object], repeats: int) -> float:
    """The fastest of ``repeats`` calls, each bracketed by device synchronisations."""
    import torch

    def synchronised() -> None:
        call()
        torch.cuda.synchronize()

    torch.cuda.synchronize()
    return _best_seconds(synchronised, repeats)


def measure_device_peaks() -> HostPeaks:
    """The CUDA device's float32-input GEMM rate (TF32 tensor cores allowed: the fastest
    way float32 inputs can be multiplied, so no honest kernel beats it) and copy
    bandwidth."""
    import torch

    n = 8192
    allowed = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        a = torch.randn(n, n, device="cuda")
        b = torch.randn(n, n, device="cuda")
        gemm = _device_seconds(lambda: torch.mm(a, b), repeats=10)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allowed
    size = 2 * 2**30
    source = torch.ones(size // 4, device="cuda")
    target = torch.empty_like(source)
    copy = _device_seconds(lambda: target.copy_(source), repeats=10)
    return HostPeaks(device_fingerprint(), 2 * n**3 / gemm, 2 * size / copy)


def measure_peaks(threads: int, device: str = "cpu", fma_library: str | None = None
                  ) -> HostPeaks:
    """Measure float32 FLOP/s and memory bandwidth with ``threads`` threads (~3 s), or the
    CUDA device's when ``device`` is "cuda". ``fma_library`` is ``fma_peak.c`` built for
    this host (``build_fma_library``); without it only the GEMM rate counts."""
    if device == "cuda":
        return measure_device_peaks()
    import torch

    torch.set_num_threads(threads)
    a = torch.randn(_GEMM_N, _GEMM_N)
    b = torch.randn(_GEMM_N, _GEMM_N)
    flops = 2 * _GEMM_N**3 / _best_seconds(lambda: torch.mm(a, b), repeats=5)
    if fma_library is not None:
        rate = ctypes.CDLL(fma_library).swarmfab_fma_rate
        rate.restype, rate.argtypes = ctypes.c_double, [ctypes.c_int, ctypes.c_double]
        flops = max(flops, *(rate(threads, 0.3) for _ in range(3)))
    source = torch.ones(_COPY_BYTES // 4)
    target = torch.empty_like(source)
    copy = _best_seconds(lambda: target.copy_(source), repeats=5)
    update = _best_seconds(lambda: source.mul_(1.0), repeats=5)  # read and written in place
    return HostPeaks(host_fingerprint(threads), flops, 2 * _COPY_BYTES / min(copy, update))


def build_fma_library(directory: Path) -> str | None:
    """``fma_peak.c`` compiled for this host into ``directory``; None without a working C
    compiler (the GEMM rate is then the peak)."""
    source = resources.files(__package__).joinpath("fma_peak.c").read_text()
    (directory / "fma_peak.c").write_text(source)
    library = directory / "fma_peak.so"
    compiler = os.environ.get("CC") or "gcc"
    try:
        done = subprocess.run([compiler, "-O2", "-march=native", "-fopenmp", "-fPIC", "-shared",
                               "-o", str(library), str(directory / "fma_peak.c")],
                              capture_output=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return str(library) if done.returncode == 0 else None
