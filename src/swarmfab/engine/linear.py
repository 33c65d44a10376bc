"""The engine's linear layers: ``F.linear``, or oneDNN with each weight packed once.

PyTorch's CPU ``F.linear`` in float32 calls MKL's sgemm, whose speed at the few rows of a
decode step depends on the CPU: on a 2-core AMD EPYC with AVX-512 (torch 2.13), an
8x768 input against a 2048x768 weight takes 414 us (15 GB/s of weights), where oneDNN,
given the weight reordered into the layout its kernel reads (as Inductor's freezing does
for a CPU linear), takes 173 us (36 GB/s). Decode steps are such matmuls end to end.

Choices (the ``linear`` kernel slot):

- ``torch``: ``F.linear``;
- ``onednn``: :class:`PackedLinear`; each weight is packed on first use and kept, so the
  weights take twice their memory;
- ``auto`` (the default): whichever of the two is clearly faster on this host, timed once
  at start-up on one of the model's weights at a decode step's rows (:func:`choose`).

Both compute the same products; their sums may round differently in the last bits.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from swarmfab.errors import EngineError
from swarmfab.kernels import host_cpu_flags
from swarmfab.kernels.gemm import onednn_available, onednn_clearly_faster, onednn_linear

__all__ = ["LINEARS", "Linear", "PackedLinear", "checked", "choose", "onednn_available",
           "onednn_packs"]

Linear = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
LINEARS = ("auto", "torch", "onednn")


class PackedLinear:
    """``F.linear(x, w)`` (no bias) through oneDNN, ``w`` reordered once. A packed copy is
    kept per weight, keyed by its memory and shape, with the weight itself (so that
    memory is never reused while the key stands): one instance per model."""

    def __init__(self, rows_hint: int = 8):
        if not onednn_available():
            raise EngineError("linear = 'onednn' needs a PyTorch built with oneDNN "
                              "(torch.backends.mkldnn); use 'torch' or 'auto'")
        self.rows_hint = rows_hint
        self._packed: dict[tuple[int, tuple[int, ...], tuple[int, ...]],
                           tuple[torch.Tensor, torch.Tensor]] = {}

    def __call__(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        key = (weight.data_ptr(), tuple(weight.shape), weight.stride())
        held = self._packed.get(key)
        if held is None:
            packed = torch.ops.mkldnn._reorder_linear_weight(weight, self.rows_hint)
            held = self._packed[key] = (weight, packed)
        return onednn_linear(x, held[1])


def checked(name: str) -> str:
    """``name`` if it is one of :data:`LINEARS`, else an :class:`EngineError`."""
    if name not in LINEARS:
        raise EngineError(f"linear must be one of {', '.join(LINEARS)}, not {name!r}")
    return name


# what oneDNN's bfloat16 weight packing needs of the CPU (any one of these sets)
_ONEDNN_BF16 = (frozenset({"avx_ne_convert"}), frozenset({"avx512bw", "avx512vl", "avx512dq"}))


def onednn_packs(dtype: torch.dtype) -> bool:
    """Whether oneDNN can pack weights of ``dtype`` on this CPU."""
    if not onednn_available():
        return False
    return dtype != torch.bfloat16 or any(need <= host_cpu_flags() for need in _ONEDNN_BF16)


def choose(name: str, weight: torch.Tensor, rows: int = 8) -> tuple[Linear, str]:
    """The linear for slot value ``name`` and the name of what it is (``auto`` resolved by
    timing both on ``weight`` with ``rows`` input rows, alternately)."""
    packs = onednn_packs(weight.dtype)
    if checked(name) == "torch" or (name == "auto" and not packs):
        return F.linear, "torch"
    if name == "onednn":
        if onednn_available() and not packs:
            raise EngineError("linear = 'onednn' packs bfloat16 weights only on a CPU with "
                              "AVX512-BW/VL/DQ or AVX-NE-CONVERT; use 'torch' or 'auto'")
        return PackedLinear(rows), "onednn"
    packed = PackedLinear(rows)
    # a constant input: the probe leaves the global random state as it was
    x = torch.full((rows, weight.shape[1]), 0.5, dtype=weight.dtype)
    faster = onednn_clearly_faster(x, weight, packed)  # packs ``weight`` in ``packed``
    return (packed, "onednn") if faster else (F.linear, "torch")
