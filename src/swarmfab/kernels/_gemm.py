"""Which library runs this host's float32 GEMMs faster: ATen's BLAS (MKL) or oneDNN.

The answer depends on the CPU, not on the code: on a 2-core AMD EPYC with AVX-512
(torch 2.13), oneDNN ran a 256x1024 by 1024x2048 product in 5.7 ms where ``F.linear``
(MKL) took 8.0 ms. So it is timed, on this host, never assumed; the engine's ``linear``
slot and the module design space's ``gemm`` knob both ask here.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

__all__ = ["CLEARLY_FASTER", "onednn_available", "onednn_clearly_faster",
           "onednn_gemm_faster"]

# oneDNN is taken only when its median is below this fraction of F.linear's: a choice
# that flipped with the noise of a busy host would make two runs differ for nothing
CLEARLY_FASTER = 0.8

Gemm = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def onednn_available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn,
                                                            "_linear_pointwise")


def onednn_clearly_faster(x: torch.Tensor, weight: torch.Tensor, onednn: Gemm,
                          rounds: int = 15) -> bool:
    """Whether ``onednn(x, weight)`` is clearly faster than ``F.linear(x, weight)``:
    both timed alternately ``rounds`` times after two warm-up rounds, medians compared."""
    timings: dict[str, list[float]] = {"torch": [], "onednn": []}
    with torch.inference_mode():
        for round_ in range(rounds + 2):
            for label, gemm in (("torch", F.linear), ("onednn", onednn)):
                start = time.perf_counter()
                gemm(x, weight)
                if round_ >= 2:
                    timings[label].append(time.perf_counter() - start)
    return statistics.median(timings["onednn"]) < CLEARLY_FASTER * statistics.median(
        timings["torch"])


@functools.cache
def onednn_gemm_faster() -> bool:
    """Whether oneDNN runs a problem-sized float32 GEMM (256x1024 by 1024x1024, weights
    as given, not reordered) clearly faster than ATen here; timed once per process,
    on constant inputs (the global random state stays as it was)."""
    if not onednn_available():
        return False
    x, weight = torch.full((256, 1024), 0.5), torch.full((1024, 1024), 0.25)
    return onednn_clearly_faster(x, weight, _onednn_linear, rounds=7)


def _onednn_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, weight, None, "none", [], "")
