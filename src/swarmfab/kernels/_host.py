"""What the host's CPU reports it can run: the vector ISAs a design space may target.

A knob value that targets an ISA the host lacks would build a kernel that dies of an
illegal instruction, so spaces offer only the targets listed here.
"""

from __future__ import annotations

import functools
import os
import platform
import re
import subprocess
from pathlib import Path

__all__ = [
    "BF16_FLAGS",
    "IsaTarget",
    "all_isa_names",
    "full_width_isa",
    "host_cpu_flags",
    "isa_targets",
    "narrow_native_vectors",
    "native_vector_bits",
    "vector_registers",
]

IsaTarget = tuple[str, tuple[str, ...]]  # knob value, compiler flags

_X86_64_V3 = {"avx", "avx2", "fma", "bmi1", "bmi2", "f16c", "movbe"}
_X86_64_V4 = _X86_64_V3 | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}
# either one means the CPU computes in bfloat16 (AVX512-BF16 dot products, AMX tiles)
BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


@functools.cache
def host_cpu_flags() -> frozenset[str]:
    """The feature flags of the first CPU in /proc/cpuinfo (empty where there is none)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def isa_targets(flags: frozenset[str] | None = None, machine: str | None = None
                ) -> tuple[IsaTarget, ...]:
    """Vector targets this host can run, plainest first; ``native`` (the compiler's own
    reading of the host) is always offered."""
    flags = host_cpu_flags() if flags is None else flags
    machine = platform.machine() if machine is None else machine
    targets: list[IsaTarget] = []
    if machine in ("x86_64", "AMD64"):
        targets.append(("sse2", ("-march=x86-64",)))
        if _X86_64_V3.issubset(flags):
            targets.append(("avx2", ("-march=x86-64-v3",)))
        if _X86_64_V4.issubset(flags):
            targets.append(("avx512-256", ("-march=x86-64-v4",)))
            targets.append(("avx512", ("-march=x86-64-v4", "-mprefer-vector-width=512")))
    targets.append(("native", ("-march=native",)))
    if "avx512f" in flags:
        targets.append(("native-512", ("-march=native", "-mprefer-vector-width=512")))
    return tuple(targets)


_PREFERRED_WIDTH = re.compile(r"^\s*-mprefer-vector-width=\s+(\d+)\s*$", re.MULTILINE)


def native_vector_bits(compiler: str | None = None) -> int | None:
    """The vector width, in bits, the C compiler's ``-march=native`` tuning prefers for
    this host (GCC's ``-mprefer-vector-width``); None where the compiler does not say (not
    GCC, not x86, or it cannot run)."""
    return _native_vector_bits(compiler or os.environ.get("CC") or "gcc")


@functools.cache
def _native_vector_bits(compiler: str) -> int | None:
    try:
        done = subprocess.run([compiler, "-march=native", "-Q", "--help=target"],
                              capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = _PREFERRED_WIDTH.search(done.stdout) if done.returncode == 0 else None
    return int(found.group(1)) if found else None


def narrow_native_vectors(flags: frozenset[str] | None = None,
                          native_bits: int | None = None) -> bool:
    """Whether ``-march=native`` code is narrower than the host's vectors:
    - an AVX-512 host the compiler tunes for 256-bit vectors (GCC does so for most Intel
      AVX-512 cores). A core with two 512-bit FMA units then runs ``native`` code at half
      its peak: a 2-core Xeon with AMX read 488 GFLOP/s for 512-bit FMAs, and the
      recurrence built with ``-mprefer-vector-width=512`` ran 1.4-1.5x faster;
    - an AVX2 host it tunes for 128-bit vectors: GCC 12 takes an AMD CPU whose model a VM
      hides for a first Zen (``znver1``) and halves its loops' vectors. On such a 2-core
      EPYC the recurrence ran 1.14x and the chunked form 1.38x faster built for
      ``x86-64-v3``."""
    flags = host_cpu_flags() if flags is None else flags
    full = 512 if "avx512f" in flags else 256 if _X86_64_V3.issubset(flags) else None
    if full is None:
        return False
    bits = native_vector_bits() if native_bits is None else native_bits
    return bits is not None and bits < full


def full_width_isa(flags: frozenset[str] | None = None,
                   native_bits: int | None = None) -> str | None:
    """The ``isa`` value whose code has the host's full vector width where ``native``
    code is narrower (:func:`narrow_native_vectors`): ``native-512`` with AVX-512,
    ``avx2`` (``x86-64-v3``, generic tuning: 256-bit vectors) before it; None where
    ``native`` is as wide as the host."""
    flags = host_cpu_flags() if flags is None else flags
    if not narrow_native_vectors(flags, native_bits):
        return None
    return "native-512" if "avx512f" in flags else "avx2"


def vector_registers(flags: frozenset[str] | None = None) -> int:
    """The vector registers the host's widest ISA gives a kernel, as the C templates count
    them: 32 with AVX-512, 16 before it."""
    flags = host_cpu_flags() if flags is None else flags
    return 32 if "avx512f" in flags else 16


def all_isa_names() -> tuple[str, ...]:
    """Every target name ``isa_targets`` offers on some host, plainest first (an x86-64
    CPU with AVX-512 is offered them all): the values a stored setting may name, whatever
    the host reading it."""
    return tuple(name for name, _ in isa_targets(frozenset(_X86_64_V4), "x86_64"))
