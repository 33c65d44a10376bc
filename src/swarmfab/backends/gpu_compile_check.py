"""Compile every GPU template for Hopper (sm_90) without a device: ``make gpu-compile-check``.

CUDA: each knob value of the CUDA template at least once (the default setting, then one
knob changed at a time), built by the real :class:`CudaBackend` (nvcc, sm_90a).
Triton: each kernel of the Triton template, every chunk size and tensor-core precision,
with float32 inputs and with fla's bfloat16 ones, compiled by ``triton.compile`` for
``GPUTarget("cuda", 90, 32)`` down to a cubin.
ptxas's report (registers, spills, shared memory) is printed for each: spills are the
cheapest signal of a bad tile before any device time, and a kernel asking for more shared
memory than sm_90 gives a block (227 KB) fails here rather than at its launch.

Exit status: 0 when everything compiled; 1 when something failed to compile; 2 when
nvcc or Triton is missing (the check cannot run: the message says which).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from swarmfab.backends.gpu import CudaBackend
from swarmfab.errors import BuildError
from swarmfab.kernels import Setting
from swarmfab.kernels.delta_gpu import gpu_space, render_triton

__all__ = ["Compiled", "cuda_settings", "main", "missing_tools", "triton_settings"]

TRITON_TARGET = ("cuda", 90, 32)
PTXAS_ARCH = "sm_90a"
SM90_SHARED_BYTES = 232_448  # the most shared memory a block may have on sm_90 (227 KB)
_SHAPE = {"H": 16, "HV": 16, "K": 128, "V": 128}  # fla's head size
_POINTERS = ("q", "k", "v", "g", "beta", "h0", "o", "ht")
_GIVEN = ("q", "k", "v", "beta", "o")  # in the goal's dtype; g and the states float32
_USAGE = re.compile(r"Used (\d+) registers.*?(?:(\d+) bytes smem)?$", re.MULTILINE)
_SPILLS = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")


@dataclass(frozen=True, slots=True)
class Compiled:
    """One template setting compiled for sm_90: what ptxas reports, or the error."""

    label: str
    seconds: float
    registers: int | None = None
    spill_bytes: int | None = None
    shared_bytes: int | None = None
    error: str = ""


def missing_tools() -> list[str]:
    """What the check needs and this host lacks (nvcc and ptxas on PATH, Triton)."""
    missing = [tool for tool in ("nvcc", "ptxas") if shutil.which(tool) is None]
    if importlib.util.find_spec("triton") is None:
        missing.append("triton (pip install 'swarmfab[gpu]')")
    return missing


def cuda_settings(quick: bool = False) -> Iterator[Setting]:
    """The CUDA kernel's default setting, then every other value of its knobs, one at a time."""
    space = gpu_space()
    base = {**space.default(), "kernel": "cuda-recurrent"}
    yield base
    if quick:
        return
    for name in ("block_v", "k_split", "state"):
        for value in space.knob(name).values:
            if value != base[name]:
                yield {**base, name: value}


def triton_settings(quick: bool = False) -> Iterator[tuple[Setting, str]]:
    """(setting, the dtype q, k, v, beta and o come in): the Triton kernels; the chunked
    one at every chunk size and precision; again with bfloat16 inputs, the chunked one
    with bfloat16 products at chunks 16 and 64; fla's three-kernel form at chunks 16 (the
    space's starting point) and 64 with float32 and with bfloat16 inputs and products."""
    space = gpu_space()
    base = space.default()
    yield {**base, "kernel": "triton-recurrent"}, "float32"
    yield base, "float32"
    if quick:
        return
    for chunk in (32, 64):
        yield {**base, "chunk": chunk}, "float32"
    for precision in ("tf32x3", "tf32"):
        yield {**base, "chunk": 16, "dot_precision": precision}, "float32"
    yield {**base, "kernel": "triton-recurrent"}, "bfloat16"
    for chunk in (16, 64):
        yield {**base, "chunk": chunk, "dot_precision": "bf16"}, "bfloat16"
    for chunk in (16, 64):
        parallel = {**base, "kernel": "triton-chunked-parallel", "chunk": chunk, "stages": 2}
        yield parallel, "float32"
        yield {**parallel, "dot_precision": "bf16"}, "bfloat16"


def _label(setting: Setting, inputs: str = "") -> str:
    keys = ("kernel", "chunk", "block_v", "dot_precision", "warps", "stages") if str(
        setting["kernel"]).startswith("triton") else ("kernel", "block_v", "k_split", "state")
    label = " ".join(f"{key}={setting[key]}" for key in keys)
    return f"{label} inputs={inputs}" if inputs else label


def _ptxas_report(text: str) -> tuple[int | None, int | None, int | None]:
    """Most registers, most spilled bytes and most shared memory over the kernels."""
    usage = [(int(m[1]), int(m[2] or 0)) for m in _USAGE.finditer(text)]
    spills = [int(m[1]) + int(m[2]) for m in _SPILLS.finditer(text)]
    if not usage:
        return None, None, None
    return (max(r for r, _ in usage), max(spills, default=0), max(s for _, s in usage))


def compile_cuda(setting: Setting, cache: Path) -> Compiled:
    """Build with the real backend (nvcc for sm_90a, ptxas -v) and read its report."""
    space, started = gpu_space(), time.monotonic()
    candidate = space.instantiate(setting, threads=1)
    try:
        artifact = CudaBackend(arch=PTXAS_ARCH).build(candidate, cache)
    except BuildError as exc:
        return Compiled(_label(setting), time.monotonic() - started, error=str(exc))
    report = (artifact.path.parent / "ptxas.txt").read_text()
    return Compiled(_label(setting), time.monotonic() - started, *_ptxas_report(report))


def compile_triton(setting: Setting, inputs: str, workdir: Path) -> Compiled:
    """Render, import and compile the setting's kernels for sm_90 (no device needed),
    q, k, v, beta and o in ``inputs`` (float32 or bfloat16), g and the rest float32;
    ptxas's figures are the largest over the kernels."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    started = time.monotonic()
    label = _label(setting, inputs)
    path = workdir / f"kda_triton_{abs(hash(label))}.py"
    path.write_text(render_triton(setting))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    given = "*bf16" if inputs == "bfloat16" else "*fp32"
    figures: list[tuple[int | None, int | None, int]] = []
    for number, (name, pointers, scalars, constants) in enumerate(_triton_kernels(setting)):
        signature = {p: given if p in _GIVEN else "*fp32" for p in pointers}
        signature |= scalars | dict.fromkeys(constants, "constexpr")
        try:
            compiled = triton.compile(ASTSource(getattr(module, name), signature, constants),
                                      target=GPUTarget(*TRITON_TARGET),
                                      options={"num_warps": int(setting["warps"]),
                                               "num_stages": int(setting["stages"])})
        except Exception as exc:  # Triton raises many kinds; all mean "does not compile"
            return Compiled(label, time.monotonic() - started,
                            error=f"{name}: {type(exc).__name__}: {exc}")
        ptx = workdir / f"{path.stem}_{number}.ptx"
        ptx.write_text(compiled.asm["ptx"])
        report = subprocess.run([_triton_ptxas(), f"-arch={PTXAS_ARCH}", "-v", str(ptx),
                                 "-o", "/dev/null"], capture_output=True, text=True,
                                timeout=300)
        if report.returncode != 0:
            return Compiled(label, time.monotonic() - started,
                            error=f"{name}: ptxas: {report.stderr.strip()[:300]}")
        registers, spills, _ = _ptxas_report(report.stderr)
        shared = int(compiled.metadata.shared)
        if shared > SM90_SHARED_BYTES:
            return Compiled(label, time.monotonic() - started,
                            error=f"{name}: needs {shared} bytes of shared memory; sm_90 "
                                  f"gives a block {SM90_SHARED_BYTES}")
        figures.append((registers, spills, shared))
    return Compiled(label, time.monotonic() - started,
                    max((f[0] for f in figures if f[0] is not None), default=None),
                    max((f[1] for f in figures if f[1] is not None), default=None),
                    max(f[2] for f in figures))


def _triton_kernels(setting: Setting) -> list[tuple[str, tuple[str, ...], dict[str, str],
                                                    dict[str, object]]]:
    """(kernel, pointer arguments, scalar arguments, constants) of the setting's kernels."""
    state = {**_SHAPE, "BK": 128, "BV": int(setting["block_v"])}
    flags = {"HAS_H0": True, "STORE_HT": True}
    chunk = {"C": int(setting["chunk"]), "PRECISION": str(setting["dot_precision"])}
    times = {"scale": "fp32", "T": "i32"}
    if setting["kernel"] == "triton-recurrent":
        return [("kda_recurrent_kernel", _POINTERS, times, {**state, **flags})]
    if setting["kernel"] == "triton-chunked":
        return [("kda_chunked_kernel", _POINTERS, times, {**state, **flags, **chunk})]
    heads = {"H": _SHAPE["H"], "HV": _SHAPE["HV"], "K": _SHAPE["K"], "BK": 128}
    chunks = {"T": "i32", "NT": "i32"}
    return [
        ("kda_intra_kernel", ("q", "k", "g", "beta", "cum_out", "w_out", "m_out",
                              "scores_out"), times, {**heads, **chunk}),
        ("kda_state_kernel", ("k", "v", "h0", "cum", "w", "m", "states", "corrected", "ht"),
         chunks, {**state, **chunk, **flags}),
        ("kda_output_kernel", ("q", "cum", "scores", "states", "corrected", "o"),
         {"scale": "fp32", **chunks}, {**state, **chunk}),
    ]


def _triton_ptxas() -> str:
    """The ptxas Triton itself uses for sm_90 (its PTX may be newer than the CUDA
    toolkit's ptxas reads); the toolkit's where Triton does not say."""
    try:
        from triton.backends.nvidia.compiler import get_ptxas

        return str(get_ptxas(TRITON_TARGET[1]).path)
    except (ImportError, AttributeError, TypeError):
        return "ptxas"


def run_checks(quick: bool, jobs: int) -> list[Compiled]:
    with tempfile.TemporaryDirectory(prefix="swarmfab-gpu-check-") as scratch:
        work = Path(scratch)
        os.environ["TRITON_CACHE_DIR"] = str(work / "triton")  # compile, never reuse
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futures = [pool.submit(compile_cuda, s, work / "cache") for s in cuda_settings(quick)]
            futures += [pool.submit(compile_triton, s, inputs, work)
                        for s, inputs in triton_settings(quick)]
            return [future.result() for future in futures]


def _row(result: Compiled) -> str:
    def shown(value: int | None) -> str:
        return "?" if value is None else str(value)

    if result.error:
        first = result.error.strip().splitlines()[0][:160]
        return f"FAIL  {result.label}  ({result.seconds:.1f} s)\n      {first}"
    return (f"ok    {result.label}  registers={shown(result.registers)} "
            f"spills={shown(result.spill_bytes)}B smem={shown(result.shared_bytes)}B "
            f"({result.seconds:.1f} s)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="the default settings of each kernel only (about 20 s)")
    parser.add_argument("--jobs", type=int, default=2, help="compilations at once")
    args = parser.parse_args(argv)
    missing = missing_tools()
    if missing:
        print(f"gpu-compile-check cannot run: missing {', '.join(missing)}", file=sys.stderr)
        return 2
    results = run_checks(args.quick, args.jobs)
    for result in results:
        print(_row(result))
    failed = [r for r in results if r.error]
    print(f"{len(results) - len(failed)}/{len(results)} GPU template settings compile for "
          "sm_90")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
