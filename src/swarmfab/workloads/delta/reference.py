"""The delta rule's float64 reference, compiled once per host.

The verifier compares every candidate with a float64 reference computed in the trusted
parent. In PyTorch the per-token recurrence spends most of its time in the interpreter
(16 s for B1 T4096 H16 K=V=128 on a 2-core host); the same recurrence in C
(``_delta_ref.c``) takes about a second, which is what makes a run's setup fit a short
budget. Tests hold it to :func:`swarmfab.workloads.delta.math.recurrent` on every
validation case; where no C compiler works, that PyTorch form is used instead.

The library is built with the host's C compiler into the user's cache directory, keyed by
the source, the compiler's version and the CPU's flags, and reused by every later run.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path

import torch

from swarmfab.paths import user_cache

__all__ = ["compiled_reference_available", "recurrent_f64"]

_FLAGS = ("-O3", "-march=native", "-fPIC", "-shared")
_SYMBOL = "delta_reference_f64"
_lock = threading.Lock()


def _cpu_flags() -> str:
    try:
        return next((line for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith(("flags", "Features"))), "")
    except OSError:
        return ""


def _compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc") \
        or shutil.which("clang")


def _build(compiler: str, source: bytes) -> Path:
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True,
                             timeout=30, check=True).stdout
    key = hashlib.sha256(b"\0".join([source, version.encode(), " ".join(_FLAGS).encode(),
                                     _cpu_flags().encode()])).hexdigest()[:16]
    for directory in (user_cache("reference"), Path(tempfile.gettempdir()) / "swarmfab-reference"):
        target = directory / f"delta-ref-{key}.so"
        if target.is_file():
            return target
        try:
            directory.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=directory) as scratch:
                c_file = Path(scratch) / "delta_ref.c"
                c_file.write_bytes(source)
                built = Path(scratch) / "delta_ref.so"
                subprocess.run([compiler, *_FLAGS, "-o", str(built), str(c_file), "-lm"],
                               capture_output=True, text=True, timeout=120, check=True)
                os.replace(built, target)  # atomic: concurrent builders agree
            return target
        except OSError:
            continue  # an unwritable cache: try the next place
    raise OSError("no writable directory for the compiled reference")


@functools.cache
def _function() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    compiler = _compiler()
    if compiler is None:
        return None
    source = resources.files("swarmfab.workloads.delta").joinpath("reference.c").read_bytes()
    try:
        with _lock:
            library = ctypes.CDLL(str(_build(compiler, source)))
    except (OSError, subprocess.SubprocessError):
        return None
    function = getattr(library, _SYMBOL)
    function.argtypes = [ctypes.c_void_p] * 8 + [ctypes.c_double] + [ctypes.c_int64] * 8
    function.restype = ctypes.c_int
    return function


def compiled_reference_available() -> bool:
    """Whether the C reference could be built here (else the PyTorch form is used)."""
    return _function() is not None


def recurrent_f64(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
    scale: float, initial_state: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The recurrence in float64 (fla's layouts, ``g`` per key channel), or None where the
    C reference is unavailable. The (batch, value head) pairs are split between as many
    threads as the calling thread may run on (its leased cores)."""
    function = _function()
    if function is None:
        return None
    batch, steps, heads, key_dim = q.shape
    value_heads, value_dim = v.shape[2], v.shape[3]
    q, k, v, g, beta = (x.to(torch.float64).contiguous() for x in (q, k, v, g, beta))
    h0 = None if initial_state is None else initial_state.to(torch.float64).contiguous()
    out = torch.empty(batch, steps, value_heads, value_dim, dtype=torch.float64)
    state = torch.empty(batch, value_heads, key_dim, value_dim, dtype=torch.float64)
    pairs = batch * value_heads
    workers = max(1, min(len(os.sched_getaffinity(0)), pairs))
    bounds = [pairs * i // workers for i in range(workers + 1)]

    def part(first: int, last: int) -> int:
        return int(function(q.data_ptr(), k.data_ptr(), v.data_ptr(), g.data_ptr(),
                            beta.data_ptr(), None if h0 is None else h0.data_ptr(),
                            out.data_ptr(), state.data_ptr(), scale, batch, steps, heads,
                            value_heads, key_dim, value_dim, first, last))

    if workers == 1:
        codes = [part(0, pairs)]
    else:  # threads started here inherit the calling thread's cores
        with ThreadPoolExecutor(max_workers=workers) as pool:
            codes = list(pool.map(part, bounds[:-1], bounds[1:]))
    if any(codes):
        raise ValueError(f"the compiled reference refused shapes q {tuple(q.shape)}, "
                         f"v {tuple(v.shape)} (code {max(codes)})")
    return out, state
