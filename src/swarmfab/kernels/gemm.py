"""Which library runs this host's float32 GEMMs faster: ATen's BLAS (MKL) or oneDNN.

The answer depends on the CPU, not on the code: on a 2-core AMD EPYC with AVX-512
(torch 2.13), oneDNN ran a 256x1024 by 1024x2048 product in 5.7 ms where ``F.linear``
(MKL) took 8.0 ms. So it is timed, on this host, never assumed; the engine's ``linear``
slot and the module design space's ``gemm`` knob both ask here.
"""

from __future__ import annotations

import functools
import os
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

__all__ = ["CLEARLY_FASTER", "onednn_available", "onednn_clearly_faster",
           "onednn_gemm_faster", "onednn_linear"]

# oneDNN is taken only when its median is below this fraction of F.linear's: a choice
# that flipped with the noise of a busy host would make two runs differ for nothing
CLEARLY_FASTER = 0.8

Gemm = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def onednn_available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn,
                                                            "_linear_pointwise")


def onednn_clearly_faster(x: torch.Tensor, weight: torch.Tensor, onednn: Gemm,
                          rounds: int = 15, below: float | None = None) -> bool:
    """Whether ``onednn(x, weight)`` is clearly faster than ``F.linear(x, weight)``:
    both timed alternately ``rounds`` times after two warm-up rounds, the median ratio
    below ``below`` (:data:`CLEARLY_FASTER` by default)."""
    timings: dict[str, list[float]] = {"torch": [], "onednn": []}
    with torch.inference_mode():
        for round_ in range(rounds + 2):
            for label, gemm in (("torch", F.linear), ("onednn", onednn)):
                start = time.perf_counter()
                gemm(x, weight)
                if round_ >= 2:
                    timings[label].append(time.perf_counter() - start)
    below = CLEARLY_FASTER if below is None else below
    return statistics.median(timings["onednn"]) < below * statistics.median(timings["torch"])


def onednn_gemm_faster() -> bool:
    """Whether oneDNN runs a problem-sized float32 GEMM (256x1024 by 1024x2048, weights
    as given, not reordered) faster than ATen here, by a tenth at least (a starting
    point, not a crown: the search may still try the other), on as many intra-op threads
    as this thread has CPUs, as a benchmark does (at one thread the answer may differ).
    Timed once per process and thread count, on constant inputs (the global random state
    stays as it was)."""
    return _onednn_gemm_faster(len(os.sched_getaffinity(0)))


@functools.cache
def _onednn_gemm_faster(threads: int) -> bool:
    if not onednn_available():
        return False
    x, weight = torch.full((256, 1024), 0.5), torch.full((2048, 1024), 0.25)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return onednn_clearly_faster(x, weight, onednn_linear, rounds=7, below=0.9)
    finally:
        torch.set_num_threads(before)


def onednn_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``F.linear(x, weight)`` (no bias) by oneDNN; ``weight`` as given or as reordered by
    ``torch.ops.mkldnn._reorder_linear_weight``."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, None, "none", [], "")
