"""ggml's fused gated delta rule beside swarmfab's KDA kernel (``make bench-peers``).

On the five standard KDA shapes, in one process and interleaved (the project's timing
protocol, ``swarmfab.measure``: warmed up, rotating rounds, an untimed call before every
sample, medians with 95% bootstrap intervals, ratios from calls timed side by side).
ggml and swarmfab share their rounds; the PyTorch baseline, tens of times slower, is
timed in rounds of its own with ggml, so its seconds-long calls do not cut the rounds
of the close comparison (the ggml row is from its rounds with swarmfab):

- ggml: ``ggml_gated_delta_net`` as llama.cpp runs it (``swarmfab.workloads.delta.ggml``'s
  NativeStep): the state pool in ggml's layout, one graph per shape made once, each call
  one graph compute that gathers the sequences' states, runs the op and writes the
  final states back. Prefill shapes start from a pool of B states (llama.cpp reads and
  writes a sequence's state in prefill too); decode updates 64 states in a pool of 64;
- swarmfab: a C kernel (``--candidate FILE``; default: the design space's default, the
  chunked template, for prefill and the recurrent template for decode), called through
  the workload's ``forward`` (decode: states updated in place at their slots);
- torch-chunked (prefill) or torch-recurrent (decode): the PyTorch baselines;
- at decode, the memory bound in ggml's and swarmfab's rounds, as a run's table times it
  (``swarmfab.evaluation.memory_stream``: an in-place update of the call's compulsory
  bytes), printed as swarmfab's share of it.

Every implementation is checked once against the float64 reference on the shape before
it is timed (the largest relative error of o and the final states is shown). ggml runs
its own threads (``--threads``); the kernel's OpenMP and torch get as many, pinned to
that many of the allowed cores. The load average is printed first: timings on a busy
host are slow and noisy.

    python scripts/bench_peers.py [--candidate FILE] [--threads N] [--shapes 1,5] [--quick]
                                  [--no-torch] [--json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, cast

import threadpoolctl
import torch

from swarmfab.backends import get_backend
from swarmfab.evaluation import compulsory_bytes, memory_stream
from swarmfab.measure import CONFIRMATION, median_ci, paired_ratio, time_interleaved
from swarmfab.records import Estimate
from swarmfab.workloads import Case, Inputs, Shape, design_space, get_workload
from swarmfab.workloads.delta import ggml

WORKLOAD = "kda"
BOUND = "bound: in-place update"
QUICK = dataclasses.replace(CONFIRMATION, min_rounds=3, max_rounds=20, max_seconds=2.0,
                            target_width=0.03, long_call_s=0.25)


def _arguments() -> argparse.Namespace:
    shapes = get_workload(WORKLOAD).default_shapes
    listed = "; ".join(f"{i}: {s.label}" for i, s in enumerate(shapes, 1))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--candidate", type=Path, help="a C kernel file (default: the design "
                        "space's default for prefill, its recurrent template for decode)")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                        help="threads for every implementation (default: the allowed cores)")
    parser.add_argument("--shapes", default="", help=f"comma-separated numbers ({listed})")
    parser.add_argument("--quick", action="store_true", help="fewer rounds, wider intervals")
    parser.add_argument("--no-torch", action="store_true", help="leave the PyTorch baselines out")
    parser.add_argument("--json", action="store_true", help="the results as JSON on stdout")
    parser.add_argument("--workdir", type=Path, default=Path(".swarmfab"), help="build cache")
    return parser.parse_args()


def _pin(threads: int) -> None:
    """``threads`` threads for torch, OpenMP and BLAS, on as many of the allowed cores."""
    torch.set_num_threads(threads)
    threadpoolctl.threadpool_limits(limits=threads)
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) > threads:
        os.sched_setaffinity(0, allowed[:threads])


def _host() -> dict[str, Any]:
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    isa = [f for f in ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_bf16",
                       "amx_tile") if f in flags]
    return {"cpu": model, "isa": isa, "cores": os.cpu_count(),
            "allowed_cores": len(os.sched_getaffinity(0)), "load_average": os.getloadavg(),
            "torch": torch.__version__}


def _kernels(args: argparse.Namespace, threads: int) -> dict[str, Any]:
    """The swarmfab candidate for prefill and for decode, built and loaded."""
    backend = get_backend("c")
    if args.candidate is not None:
        from swarmfab.backends.files import candidate_from_file

        chosen = candidate_from_file(WORKLOAD, args.candidate)
        candidates = {"prefill": chosen, "decode": chosen}
    else:
        space = design_space(WORKLOAD)
        candidates = {
            "prefill": space.instantiate(space.default(), threads=threads),
            "decode": space.instantiate({**space.default(), "algorithm": "recurrent"},
                                        threads=threads),
        }
    workload = get_workload(WORKLOAD)
    loaded = {}
    for use, candidate in candidates.items():
        artifact = backend.build(candidate, args.workdir)
        loaded[use] = (candidate.entry, backend.load(artifact, workload, fill_outputs=False))
    return loaded


def _copy(inputs: Inputs) -> Inputs:
    return {n: x.clone() if isinstance(x, torch.Tensor) else x for n, x in inputs.items()}


def _error(actual: Mapping[str, torch.Tensor], expected: Mapping[str, torch.Tensor]) -> float:
    """The largest relative (Frobenius) error over the outputs."""
    return max(float((actual[n].double() - expected[n]).norm() / expected[n].norm())
               for n in expected)


def _ggml_step(net: ggml.GatedDeltaNet, shape: Shape, inputs: Inputs,
               expected: dict[str, torch.Tensor]) -> tuple[Callable[[], object], float]:
    """The native step on the shape, checked on its first call."""
    q, k, v, g, beta = (cast(torch.Tensor, inputs[n]) for n in ("q", "k", "v", "g", "beta"))
    step = net.native(q, k, v, g, beta, slots=shape.pool or shape.B,
                      state_indices=inputs.get("state_indices"))
    initial = inputs["initial_state"]
    if isinstance(initial, torch.Tensor):
        step.pool.copy_(step.pool_from(initial))
    else:
        step.pool.zero_()
    o = step().clone()
    error = _error({"o": o, "final_state": step.pool_as_fla()}, expected)
    return step, error


def _bench_shape(shape: Shape, index: int, kernels: dict[str, Any], net: ggml.GatedDeltaNet,
                 args: argparse.Namespace) -> dict[str, Any]:
    workload = get_workload(WORKLOAD)
    inputs = workload.make_inputs(Case(f"shape-{index}", shape))
    expected = {n: x.double() for n, x in workload.reference(inputs).items()}
    calls: dict[str, Callable[[], object]] = {}
    errors: dict[str, float] = {}
    calls["ggml"], errors["ggml"] = _ggml_step(net, shape, inputs, expected)
    decode = shape.T == 1
    entry, forward = kernels["decode" if decode else "prefill"]
    contenders: dict[str, Callable[..., Any]] = {"swarmfab": forward}
    if not args.no_torch:
        name = "torch-recurrent" if decode else "torch-chunked"
        contenders[name] = workload.baselines()[name]
    for name, function in contenders.items():
        own = _copy(inputs)
        with torch.no_grad():
            errors[name] = _error(workload.call(function, _copy(inputs)), expected)
        calls[name] = (lambda f=function, i=own: workload.call(f, i))  # type: ignore[misc]
    moved = compulsory_bytes(workload, shape) or 0.0
    bound = _bound_call(shape, moved)
    if bound is not None:
        calls[BOUND] = bound
    policy = QUICK if args.quick else CONFIRMATION
    flops = workload.flops(shape) or 0.0
    rows = {}
    # ggml and swarmfab in rounds of their own, then the (far slower) PyTorch baseline
    # in rounds with ggml: a baseline's seconds-long calls would otherwise cut the rounds
    # the close comparison gets to the policy's minimum for long calls
    groups = [["ggml", "swarmfab", *([BOUND] if bound is not None else [])]]
    baselines = [name for name in calls if name.startswith("torch")]
    if baselines:
        groups.append(["ggml", *baselines])
    close: dict[str, Any] = {}  # the samples of ggml's rounds with swarmfab (and the bound)
    for group in groups:
        with torch.no_grad():
            samples = time_interleaved({n: calls[n] for n in group}, policy, reference="ggml")
        if group is groups[0]:
            close = samples
        for name in group:
            if name in rows or name == BOUND:  # ggml's own figures: its rounds with swarmfab
                continue
            time = median_ci(samples[name])
            rows[name] = {"seconds": _json(time), "gflops": flops / time.median / 1e9,
                          "speedup_over_ggml": _json(paired_ratio(samples["ggml"],
                                                                  samples[name])),
                          "samples": len(samples[name]), "relative_error": errors[name]}
    result = {"shape": shape.label, "swarmfab_kernel": entry, "implementations": rows}
    if bound is not None:
        update = median_ci(close[BOUND])
        result["memory_bound"] = {
            "update_seconds": _json(update), "update_gb_per_s": moved / update.median / 1e9,
            # the update's time over swarmfab's, in the same rounds: its share of the bound
            "swarmfab_fraction": _json(paired_ratio(close[BOUND], close["swarmfab"]))}
    return result


def _bound_call(shape: Shape, nbytes: float) -> Callable[[], object] | None:
    """At decode in place: the memory bound timed in the same rounds, an in-place update
    of the call's compulsory ``nbytes`` (the state pool read and written, the inputs and
    o).
    The host's bandwidth drifts by tens of per cent within minutes on a shared VM, so a
    fraction of a bound measured minutes earlier says little; one measured beside the
    kernel does."""
    if shape.T != 1 or not shape.pool or not nbytes:
        return None
    return memory_stream(nbytes)


def _json(estimate: Estimate) -> dict[str, float]:
    return {"median": estimate.median, "low": estimate.low, "high": estimate.high}


def _table(results: list[dict[str, Any]], title: str) -> Any:
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    table.add_column("shape", no_wrap=True)
    table.add_column("implementation", no_wrap=True)
    # x ggml: ggml's time over this one's, from the same rounds (> 1: faster than ggml)
    for column in ("ms", "95% CI", "x ggml", "95% CI", "GFLOP/s", "error", "rounds"):
        table.add_column(column, justify="right", no_wrap=True)
    for result in results:
        for index, (name, row) in enumerate(result["implementations"].items()):
            t, r = (row[key] for key in ("seconds", "speedup_over_ggml"))
            table.add_row(
                result["shape"] if index == 0 else "", name, _ms(t["median"]),
                f"{_ms(t['low'])}-{_ms(t['high'])}",
                "-" if name == "ggml" else f"{r['median']:.2f}x",
                "" if name == "ggml" else f"{r['low']:.2f}-{r['high']:.2f}",
                f"{row['gflops']:.1f}", f"{row['relative_error']:.1e}", str(row["samples"]))
    return table


def _ms(seconds: float) -> str:
    milliseconds = seconds * 1e3
    return f"{milliseconds:.1f}" if milliseconds >= 10 else f"{milliseconds:.3f}"


def main() -> int:
    args = _arguments()
    from rich.console import Console

    console = Console(stderr=args.json, width=None if sys.stdout.isatty() else 140)
    host = _host()
    load = host["load_average"][0]
    console.print(f"host: {host['cpu']}; ISA {' '.join(host['isa']) or '-'}; "
                  f"{host['allowed_cores']} allowed core(s); torch {host['torch']}")
    console.print(f"load average at start: {load:.2f} {host['load_average'][1]:.2f} "
                  f"{host['load_average'][2]:.2f}")
    if load >= host["allowed_cores"]:
        console.print(f"[yellow]warning: load average {load:.2f} on {host['allowed_cores']} "
                      "core(s): other processes keep the cores busy; timings will be slow "
                      "and noisy[/]")
    reason = ggml.available()
    if reason is not None:
        console.print(f"[red]ggml is not usable:[/] {reason}")
        return 2
    facts = ggml.describe()
    console.print(f"ggml {facts['version']} (commit {facts['commit']}, {facts['origin']}: "
                  f"{facts['path']}); {facts['build'].get('source', 'prebuilt')}; OpenMP "
                  f"{'yes' if facts['openmp'] else 'no'}; features {' '.join(facts['features'])}")
    all_shapes = [s for s in get_workload(WORKLOAD).default_shapes if isinstance(s, Shape)]
    chosen = [int(x) for x in args.shapes.split(",") if x.strip()] or range(1, 6)
    _pin(args.threads)
    kernels = _kernels(args, args.threads)
    console.print(f"swarmfab kernels ({args.threads} thread(s)): prefill "
                  f"{kernels['prefill'][0]}, decode {kernels['decode'][0]}")
    net = ggml.GatedDeltaNet(threads=args.threads)
    results = []
    for index in chosen:
        shape = all_shapes[index - 1]
        console.print(f"timing {shape.label} ...")
        results.append(_bench_shape(shape, index, kernels, net, args))
    if args.json:
        print(json.dumps({"host": host, "threads": args.threads, "ggml": facts,
                          "policy": "quick" if args.quick else "confirmation",
                          "results": results}, indent=2))
    else:
        console.print(_table(results, f"{WORKLOAD}: ggml (as llama.cpp runs it) beside "
                                      f"swarmfab, {args.threads} thread(s), interleaved; "
                                      "x ggml: ggml's time / this one's; error: relative "
                                      "to the float64 reference"))
        for result in results:
            if "memory_bound" in result:
                bound, share = result["memory_bound"], result["memory_bound"]["swarmfab_fraction"]
                console.print(f"{result['shape']}: swarmfab at {share['median']:.0%} "
                              f"[{share['low']:.0%}, {share['high']:.0%}] of the memory bound, "
                              "an in-place update of the call's bytes timed in the "
                              f"same rounds ({_ms(bound['update_seconds']['median'])} ms, "
                              f"{bound['update_gb_per_s']:.1f} GB/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
