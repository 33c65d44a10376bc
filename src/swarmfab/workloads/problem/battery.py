"""A problem file's verification battery: its own sizes, values far from ``randn``,
other memory layouts and thread counts, weights loaded again into a live module.

- sizes: the file's own, where this host holds them (memory) and the float64 reference
  takes seconds, not minutes; else the largest halving that does. A bug that shows only
  at the real size (a block size, a second pass) is met there;
- values: every floating input scaled by 1,000; half, nine tenths and all of their
  elements exactly zero (a row of zeros, a variance near the epsilon).
  Such a case is kept only where the file's own eager Model, in float32, still matches
  the float64 reference on it (:meth:`ProblemWorkload.domain_baseline`): an input the
  operator's arithmetic itself overflows at is outside the problem, not a candidate's
  fault;
- layouts: inputs as views into wider buffers, and column-major;
- threads: one, and the evaluator's;
- weights: the small cases share their sizes and differ in their weights, so a module
  is given new weights while it lives (``load_state_dict``, as a user loading a
  checkpoint does); whatever it prepared from the first ones must follow. Every case's
  weights are as training leaves them, off their initial values: LayerNorm's ones and
  zeros hide a dropped bias, an all-zero row answered with zeros, or parameters changed
  in place on the first call.
"""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING

from swarmfab.workloads._base import Case, Dims, Distribution
from swarmfab.workloads.problem.cost import meta_cost
from swarmfab.workloads.problem.sizes import halved, validation_cases

if TYPE_CHECKING:
    from swarmfab.workloads.problem.workload import ProblemWorkload

__all__ = ["MAX_FLOPS", "battery_cases", "full_size"]

MAX_FLOPS = 2e10  # the float64 reference's work at the battery's full size (seconds)
MAX_BYTES = 1 << 30  # inputs, weights and outputs at the full size, at most
MEMORY_SHARE = 8  # and at most this share of the memory available now (copies, float64)
_SEED = 60_000
# every case's weights as training leaves them, off their initial values (module doc)
TRAINED = Distribution(weight_noise=0.1)


def _available_bytes() -> int:
    try:
        with open("/proc/meminfo") as info:
            for line in info:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 4 << 30


def full_size(problem: ProblemWorkload) -> Dims:
    """The file's own sizes, or the largest halving of them within the limits above."""
    limit = min(MAX_BYTES, _available_bytes() // MEMORY_SHARE)
    sizes = dict(problem.sizes)
    for times in range(0, 16):
        candidate = halved(sizes, times) if times else sizes
        if candidate is None:
            break
        dims = Dims.of(**candidate)
        cost = meta_cost(problem.namespace(dims)) if problem.runs_at(dims) else None
        if cost is not None and cost[0] <= MAX_FLOPS and cost[1] <= limit:
            return dims
    return validation_cases(problem)[0].shape  # type: ignore[return-value]


def battery_cases(problem: ProblemWorkload, threads: int) -> list[Case]:
    full = full_size(problem)
    small = validation_cases(problem)[0].shape
    cases = [Case(f"battery: the file's sizes ({full.label})" if full.sizes == tuple(
        problem.sizes.items()) else f"battery: the largest size held here ({full.label})",
        full, TRAINED, seed=_SEED)]
    seed = _SEED + 1
    for name, distribution in (("inputs scaled by 1000", Distribution(input_scale=1e3)),
                               ("half the inputs exactly 0", Distribution(zero_prob=0.5)),
                               ("nine tenths of the inputs exactly 0",
                                Distribution(zero_prob=0.9)),
                               ("every input exactly 0", Distribution(zero_prob=1.0))):
        distribution = dataclasses.replace(distribution, weight_noise=TRAINED.weight_noise)
        cases.append(Case(f"battery: {name}", small, distribution, seed=seed))
        seed += 1
    for layout, name in (("strided", "inputs strided (views of wider buffers)"),
                         ("transposed", "inputs column-major")):
        cases.append(Case(f"battery: {name}", small, TRAINED, seed=seed, layout=layout))
        seed += 1
    for n in sorted({1, max(1, threads or os.cpu_count() or 1)}):
        cases.append(Case(f"battery: {n} thread(s)", small, TRAINED, seed=seed, threads=n))
        seed += 1
    return cases
