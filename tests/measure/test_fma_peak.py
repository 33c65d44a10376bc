"""The FMA peak loop: its chains stay in registers at the host's vector width.

A peak measured with spilled chains is low, and every roofline fraction over it high
(on an AVX2 host the old 64-byte loop read 105 GFLOP/s where the machine does 177). These
tests read the compiled loop, not its timing: the same verdict on a busy host.
"""

from __future__ import annotations

import ctypes
import platform
import re
import shutil
import subprocess
from importlib import resources
from pathlib import Path

import pytest

from swarmfab.kernels._host import host_cpu_flags
from swarmfab.measure.roofline import build_fma_library

x86 = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"),
                         reason="reads x86-64 assembly")
needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")


def _loops(assembly: str, function: str) -> list[list[str]]:
    """The bodies of the innermost loops in ``function``'s OpenMP body that multiply-add
    (the outer loop saves the chains once per 4096 rounds, which costs nothing)."""
    lines = assembly.splitlines()
    start = next(i for i, line in enumerate(lines)
                 if line.startswith(function) and line.endswith(":"))
    end = next(i for i in range(start, len(lines)) if lines[i].strip().startswith(".size"))
    body = lines[start:end]
    labels = {line[:-1]: i for i, line in enumerate(body) if re.fullmatch(r"\.L\d+:", line)}
    loops = []
    for i, line in enumerate(body):
        jump = re.match(r"\s+j\w+\s+(\.L\d+)$", line)
        if jump and labels.get(jump.group(1), i) < i:
            loop = body[labels[jump.group(1)]:i + 1]
            inner = not any(re.match(r"\s+j\w+\s+\.L\d+$", instruction)
                            for instruction in loop[:-1])
            if inner and any("vfmadd" in instruction for instruction in loop):
                loops.append(loop)
    return loops


@x86
@needs_gcc
def test_the_loop_at_the_hosts_vector_width_keeps_every_chain_in_registers(
        tmp_path: Path) -> None:
    source = tmp_path / "fma_peak.c"
    source.write_text(resources.files("swarmfab.measure").joinpath("fma_peak.c").read_text())
    assembly = tmp_path / "fma_peak.s"
    subprocess.run(["gcc", "-O2", "-march=native", "-fopenmp", "-S", "-o", str(assembly),
                    str(source)], check=True, capture_output=True, timeout=60)
    width = 64 if "avx512f" in host_cpu_flags() else 32
    loops = _loops(assembly.read_text(), f"rate_{width}_bytes._omp_fn")
    assert loops, f"no multiply-add loop found for {width}-byte vectors"
    for loop in loops:
        on_stack = [line.strip() for line in loop if re.search(r"\(%r[sb]p\)", line)]
        assert not on_stack, f"{width}-byte chains spilled to the stack: {on_stack[:4]}"


@needs_gcc
def test_the_library_reports_a_rate(tmp_path: Path) -> None:
    library = build_fma_library(tmp_path)
    assert library is not None
    rate = ctypes.CDLL(library).swarmfab_fma_rate
    rate.restype, rate.argtypes = ctypes.c_double, [ctypes.c_int, ctypes.c_double]
    assert rate(1, 0.02) > 1e8  # any vector FPU of this century
