#!/usr/bin/env python3
"""GPU-space settings against fla on the device itself, outside the sandbox and the store:
``python scripts/gpu_kernels.py [--dtype bfloat16] [--setting kernel=...,chunk=64 ...]``.

A developer's measurement, for choosing what the space starts from and searching it on a
short GPU session; `swarmfab bench` and the verifier remain what a result is quoted
from. Each setting is built by its real backend and called through the workload, on
inputs drawn as the verifier draws them. For each shape it prints the median of
``triton.testing.do_bench`` (CUDA events, warm-up first) for fla's two kernels and each
setting, each setting's time over fla's better one, and the relative L2 distance of its
o from the first implementation's (fla's chunked o unless --fla leaves it out): a sanity
check, not the verifier. fla's chunk_kda takes float32 products in TF32, about 1e-3 from
exact float32; bfloat16 products land near 3e-3.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from swarmfab.backends import get_backend
from swarmfab.evaluation import on_device
from swarmfab.goal import parse_shape
from swarmfab.kernels import Setting
from swarmfab.kernels.delta_gpu import gpu_space
from swarmfab.workloads import Case, get_workload

PREFILL = ("1,8192,96,128,128", "4,2048,16,128,128")
DECODE = ("64,1,16,128,128+h0",)
SETTINGS = (  # knobs over the space's default; the decode kernels time decode only
    "kernel=triton-chunked",
    "kernel=triton-chunked-parallel,chunk=16,stages=2",
    "kernel=triton-chunked-parallel,chunk=16,stages=2,dot_precision=tf32",
    "kernel=triton-chunked-parallel,chunk=16,stages=2,dot_precision=bf16",
    "kernel=triton-chunked-parallel,chunk=32,stages=2,dot_precision=tf32",
    "kernel=triton-chunked-parallel,chunk=64,stages=2",
    "kernel=triton-recurrent",
    "kernel=cuda-recurrent",
)
RECURRENT = ("triton-recurrent", "cuda-recurrent")


def parse_setting(text: str, default: Setting) -> Setting:
    """``default`` with the knobs ``text`` names (knob=value,...)."""
    setting = dict(default)
    for item in text.split(","):
        name, _, value = item.partition("=")
        setting[name] = int(value) if value.isdigit() else value
    return setting


def _print_kernels(call: Callable[[], object], calls: int = 3) -> None:
    """The device time per call of each kernel ``call`` launches, costliest first."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as profiler:
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    kernels = [(getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0.0),
                e.count, e.key) for e in profiler.key_averages()
               if str(getattr(e, "device_type", "")).endswith("CUDA")]  # kernels, not ops
    for total_us, count, key in sorted(kernels, reverse=True)[:6]:
        if total_us > 0:
            print(f"      {key[:64]:<64} {total_us / calls / 1e3:8.3f} ms  "
                  f"{count // calls} launch(es)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--shape", action="append", help="B,T,H,K,V[+h0] (repeatable)")
    parser.add_argument("--setting", action="append", help="knob=value,... (repeatable)")
    parser.add_argument("--fla", action="append",
                        choices=("fla-chunk", "fla-fused-recurrent", "none"),
                        help="fla's kernels to time (default both; none: neither, for a "
                             "sweep that skips fla's first-call autotuning)")
    parser.add_argument("--profile", action="store_true",
                        help="also each implementation's device time by kernel "
                             "(torch.profiler), to see which of a setting's kernels costs")
    parser.add_argument("--work", type=Path, default=Path("/tmp/swarmfab-gpu-kernels"))
    parser.add_argument("--json", type=Path, help="write every figure here")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device: this script times kernels on a GPU", file=sys.stderr)
        return 2
    import triton.testing

    workload, space = get_workload("kda"), gpu_space()
    args.work.mkdir(parents=True, exist_ok=True)
    fla_cache = os.environ.get("TRITON_CACHE_DIR")
    forwards = {}
    for text in args.setting or SETTINGS:
        setting = parse_setting(text, space.default())
        if args.dtype == "float32" and setting["dot_precision"] == "bf16":
            continue
        candidate = space.instantiate(setting, threads=1)
        backend = get_backend(candidate.backend)
        os.chdir(args.work)  # the Triton backend caches under the working directory
        forwards[text] = backend.load(backend.build(candidate, args.work / "cache"),
                                      workload, fill_outputs=False)
    if fla_cache:  # fla's kernels from the cache their warm-up filled
        os.environ["TRITON_CACHE_DIR"] = fla_cache
    wanted = args.fla or ["fla-chunk", "fla-fused-recurrent"]
    fla = {name: forward for name, forward in workload.baselines().items()
           if name in wanted}
    rows = []
    for text in args.shape or (*PREFILL, *DECODE):
        shape = parse_shape(text)
        case = Case(f"gpu-kernels {text}", shape, dtype=args.dtype)
        inputs = on_device(workload.make_inputs(case), "cuda")
        decode = shape.T == 1
        print(f"\n{text} {args.dtype}", flush=True)
        reference = None
        times: dict[str, float] = {}
        errors: dict[str, float] = {}
        # at decode fla's chunked kernel only if asked for: engines decode with the fused
        # recurrent one, and chunk_kda autotunes again for T = 1 (over a minute)
        peers = {name: forward for name, forward in fla.items()
                 if not (decode and name == "fla-chunk" and not args.fla)}
        implementations = {**peers, **{name: forward for name, forward in forwards.items()
                                       if decode or not any(r in name for r in RECURRENT)}}
        for name, forward in implementations.items():
            began = time.monotonic()
            try:
                out = workload.call(forward, inputs)["o"].float()
                torch.cuda.synchronize()
                if reference is None:
                    reference = out
                error = float((out - reference).norm() / reference.norm())
                ms = triton.testing.do_bench(lambda f=forward, i=inputs: workload.call(f, i),
                                             warmup=25, rep=100, return_mode="median")
            except Exception as exc:  # a setting that fails is a finding
                print(f"  {name:<72} failed: {type(exc).__name__}: {str(exc)[:200]}")
                continue
            times[name], errors[name] = ms, error
            print(f"  {name:<72} {ms:9.3f} ms  err {error:.1e}  "
                  f"({time.monotonic() - began:.1f} s)", flush=True)
            if args.profile:
                _print_kernels(lambda f=forward, i=inputs: workload.call(f, i))
        best_fla = min((times[name] for name in fla if name in times), default=None)
        if best_fla:
            for name, ms in times.items():
                print(f"  {name:<72} {best_fla / ms:6.2f}x fla's best")
        rows.append({"shape": text, "dtype": args.dtype, "ms": times, "error": errors,
                     "reference": next(iter(times), None)})
    if args.json:
        args.json.write_text(json.dumps({"device": torch.cuda.get_device_name(),
                                         "torch": torch.__version__, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
