"""Packed sequences in one call against one call per sequence (``make bench-varlen``).

The design space's recurrence at its default knobs, compiled here, called two ways on
the same packed inputs, rounds alternating: through its ``_varlen`` entry point (one
call, ``cu_seqlens``), and once per sequence as a caller without it would. Two batches:
many short sequences (where the calls' own cost shows) and one long sequence (where the
packed call must cost what a plain call does). Medians, and the paired ratio with its
95% CI.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from swarmfab.backends import get_backend
from swarmfab.measure.stats import median_ci, paired_ratio
from swarmfab.workloads import Case, Shape, design_space, get_workload
from swarmfab.workloads.delta.varlen import per_sequence


def _seconds(call: Callable[[], object], repeats: int) -> float:
    began = time.perf_counter()
    for _ in range(repeats):
        call()
    return (time.perf_counter() - began) / repeats


def _calls(forward: Callable[..., object], inputs: list[object]
           ) -> tuple[Callable[[], object], Callable[[], object]]:
    """The packed call, and one call per sequence, on the same inputs."""
    q, k, v, g, beta, h0, cu = inputs

    def packed() -> object:
        return forward(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                       cu_seqlens=cu)

    def separate() -> object:
        return per_sequence(forward, q, k, v, g, beta, None, h0, True, cu)  # type: ignore[arg-type]

    return packed, separate


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    workload = get_workload("kda")
    space = design_space("kda")
    candidate = space.instantiate({**space.default(), "algorithm": "recurrent"},
                                  threads=args.threads)
    backend = get_backend(candidate.backend)
    with tempfile.TemporaryDirectory() as scratch:
        forward = backend.load(backend.build(candidate, Path(scratch)), workload,
                               fill_outputs=False)
        batches = {"256 sequences of 8 tokens": (8,) * 256, "one of 4096 tokens": (4096,)}
        print(f"bench-varlen: the recurrence, {args.threads} thread(s), H4 K128 V128, "
              f"{args.rounds} alternating rounds")
        for label, lengths in batches.items():
            shape = Shape(1, sum(lengths), 4, 4, 128, 128, True, lengths=lengths)
            inputs = workload.make_inputs(Case(label, shape, seed=1))
            args_ = [inputs[n] for n in ("q", "k", "v", "g", "beta", "initial_state",
                                         "cu_seqlens")]
            packed, separate = _calls(forward, args_)
            repeats = max(1, int(0.05 / max(_seconds(packed, 1), 1e-6)))
            one, many = [], []
            for round_ in range(args.rounds):
                for name in (("packed", "separate") if round_ % 2 else ("separate", "packed")):
                    (one if name == "packed" else many).append(
                        _seconds(packed if name == "packed" else separate, repeats))
            ratio = paired_ratio(many, one)
            print(f"{label:<28} packed {median_ci(one).median * 1e3:8.3f} ms   separate "
                  f"{median_ci(many).median * 1e3:8.3f} ms   packed is {ratio.median:.2f}x "
                  f"[{ratio.low:.2f}, {ratio.high:.2f}] as fast")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
